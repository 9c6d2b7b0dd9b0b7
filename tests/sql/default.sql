-- Every statement for table 'pgqueue_jobs', history=False.

-- ==== allocate_ids
SELECT now(), array(SELECT nextval((SELECT pg_get_serial_sequence(%s, 'id')::regclass))
                      FROM generate_series(1, %s))

-- ==== cancel
WITH target AS (
    SELECT id, status FROM "pgqueue_jobs" WHERE id = ANY(%(ids)s::bigint[]) ORDER BY id FOR UPDATE
), cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j USING target AS t
     WHERE j.id = t.id AND t.status IN ('pending', 'dead', 'waiting')
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."last_error", "j"."dependents"),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, NULL, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
asked AS (
    UPDATE "pgqueue_jobs" AS j SET cancel_requested_at = coalesce(j.cancel_requested_at, now())
      FROM target AS t
     WHERE j.id = t.id AND t.status = 'running'
    RETURNING j.id)
SELECT (SELECT coalesce(array_agg(id), '{}') FROM cancelled),
       (SELECT coalesce(array_agg(id), '{}') FROM asked),
       -- The ids, or "*" (too many for a notification: workers look).
       (SELECT pg_notify(%(control)s, CASE WHEN count(*) <= 300 THEN string_agg(id::text, ',')
                                          ELSE '*' END)::text
          FROM asked HAVING count(*) > 0) IS NULL,
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       (SELECT count(*) FROM cancelled_swept)

-- ==== cancel_requests
SELECT id FROM "pgqueue_jobs" WHERE id = ANY(%s::bigint[]) AND cancel_requested_at IS NOT NULL

-- ==== check
SELECT d.id, j.status, r.outcome,
       d.id <= coalesce(pg_sequence_last_value(
                            pg_get_serial_sequence(%(table)s, 'id')::regclass), 0)
  FROM unnest(%(depends_on)s::bigint[]) AS d(id)
  LEFT JOIN "pgqueue_jobs" AS j ON j.id = d.id
  LEFT JOIN "pgqueue_jobs_results" AS r ON r.job_id = d.id
 ORDER BY d.id

-- ==== claim
WITH
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens)
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked
 LIMIT 20 - (SELECT count(*) FROM limited)))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents"

-- ==== complete
WITH
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running'
       AND (dependents IS NULL
            OR dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = "pgqueue_jobs".id))
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
done_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
done_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'succeeded', v.value, NULL, d.attempts, now() + d.result_ttl
      FROM done AS d
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
done_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING done AS d
     WHERE d.dependents IS NOT NULL AND e.parent_id = d.id
    RETURNING e.parent_id, e.job_id),
done_released AS (
    UPDATE "pgqueue_jobs" AS j
       SET waiting_on = j.waiting_on - r.n,
           status = CASE WHEN j.waiting_on > r.n THEN 'waiting' ELSE 'pending' END,
           run_at = CASE WHEN j.waiting_on > r.n THEN j.run_at ELSE greatest(j.run_at, now()) END,
           parents = coalesce(j.parents, '{}') || r.kept
      FROM (SELECT e.job_id, count(*)::integer AS n,
                   coalesce(jsonb_object_agg(e.parent_id::text, v.value)
                              FILTER (WHERE v.value IS NOT NULL), '{}') AS kept
              FROM done_edges AS e
              LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value)
                     ON v.id = e.parent_id
             GROUP BY e.job_id ORDER BY e.job_id) AS r
     WHERE j.id = r.job_id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT job_id FROM done_edges))
    RETURNING j.id,
              CASE WHEN j.status = 'pending' THEN pg_notify('pgqueue_jobs', j.kind)::text END)
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM done_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM done_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w)

-- ==== copy_in
COPY "pgqueue_jobs" ("id", "kind", "payload", "run_at", "max_attempts", "queue", "priority", "result_ttl", "limit_key") FROM STDIN

-- ==== copy_in_traced
COPY "pgqueue_jobs" ("id", "kind", "payload", "run_at", "max_attempts", "queue", "priority", "result_ttl", "limit_key", trace_context) FROM STDIN

-- ==== counted
(WITH RECURSIVE g AS (
    (SELECT queue, priority FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL ORDER BY queue, priority LIMIT 1)
    UNION ALL
    SELECT n.queue, n.priority FROM g CROSS JOIN LATERAL (
        SELECT t.queue, t.priority FROM "pgqueue_jobs" AS t
         WHERE t.status = 'pending' AND limit_key IS NULL AND (t.queue, t.priority) > (g.queue, g.priority)
         ORDER BY t.queue, t.priority LIMIT 1) AS n
)
SELECT -1, g.queue, g.priority, NULL::text, c.n, NULL::numeric
  FROM (SELECT queue, priority FROM g LIMIT %(pairs)s) AS g
 CROSS JOIN LATERAL (
    SELECT count(*) AS n FROM (
        SELECT 1 FROM "pgqueue_jobs" AS t
         WHERE t.status = 'pending' AND limit_key IS NULL AND t.queue = g.queue AND t.priority = g.priority
         ORDER BY t.run_at, t.id LIMIT %(cap)s) AS s) AS c)
UNION ALL
(SELECT 0, queue, priority, kind, count(*), sum(count(*)) OVER () FROM (
    SELECT queue, priority, kind FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NOT NULL ORDER BY limit_key, priority DESC, run_at, id LIMIT %(cap)s) AS s
 GROUP BY 2, 3, 4)
UNION ALL
(SELECT 1, queue, priority, kind, count(*), sum(count(*)) OVER () FROM (
    SELECT queue, priority, kind FROM "pgqueue_jobs" WHERE status = 'running' AND locked_at IS NOT NULL ORDER BY locked_at LIMIT %(cap)s) AS s
 GROUP BY 2, 3, 4)
UNION ALL
(SELECT 2, queue, priority, kind, count(*), sum(count(*)) OVER () FROM (
    SELECT queue, priority, kind FROM "pgqueue_jobs" WHERE status = 'dead' ORDER BY id LIMIT %(cap)s) AS s
 GROUP BY 2, 3, 4)
UNION ALL
(SELECT 3, queue, priority, kind, count(*), sum(count(*)) OVER () FROM (
    SELECT queue, priority, kind FROM "pgqueue_jobs" WHERE status = 'waiting' ORDER BY id LIMIT %(cap)s) AS s
 GROUP BY 2, 3, 4)

-- ==== dependents
SELECT job_id FROM "pgqueue_jobs_dependencies" WHERE parent_id = %s ORDER BY job_id

-- ==== enqueue
WITH parent AS (
    SELECT id, status FROM "pgqueue_jobs" WHERE id = ANY(%(depends_on)s::bigint[])
     ORDER BY id FOR UPDATE
), marked AS (
    UPDATE "pgqueue_jobs" AS j SET dependents = coalesce(j.dependents, 0) + 1
      FROM parent AS p
     WHERE j.id = p.id AND p.status <> 'dead' AND j.id = ANY(%(depends_on)s::bigint[])
    RETURNING j.id
), job AS (
    INSERT INTO "pgqueue_jobs" (kind, payload, run_at, max_attempts, queue, priority, result_ttl,
                         limit_key, trace_context, status, waiting_on, parents)
    SELECT %(kind)s, %(payload)s::jsonb,
           COALESCE(%(run_at)s::timestamptz, now() + %(delay)s::interval), %(max_attempts)s,
           %(queue)s, %(priority)s, %(result_ttl)s::interval, %(limit_key)s, %(trace_context)s,
           CASE WHEN w.n > 0 THEN 'waiting' ELSE 'pending' END, w.n,
           (SELECT jsonb_object_agg(d.id::text, NULL::jsonb)
              FROM unnest(%(depends_on)s::bigint[]) AS d(id))
           || (SELECT coalesce(jsonb_object_agg(r.job_id::text, r.value), '{}')
                 FROM "pgqueue_jobs_results" AS r
                WHERE r.job_id = ANY(%(depends_on)s::bigint[]) AND r.outcome = 'succeeded')
      FROM (SELECT count(*)::integer AS n FROM marked) AS w
    RETURNING id, kind, status
), edges AS (
    INSERT INTO "pgqueue_jobs_dependencies" (parent_id, job_id) SELECT m.id, job.id FROM marked AS m, job
)
SELECT id, CASE WHEN status = 'pending' THEN pg_notify(%(channel)s, kind) END::text,
       (SELECT coalesce(array_agg(id), '{}') FROM parent WHERE status = 'dead')
  FROM job

-- ==== enqueue_many
WITH pairs AS (
    SELECT x.j, x.p FROM unnest(%(pair_job)s::bigint[], %(pair_parent)s::bigint[]) AS x(j, p)
), parent AS (
    SELECT id, status FROM "pgqueue_jobs" WHERE id = ANY(%(pair_parent)s::bigint[])
     ORDER BY id FOR UPDATE
), marked AS (
    UPDATE "pgqueue_jobs" AS t SET dependents = coalesce(t.dependents, 0) + c.n
      FROM (SELECT x.p, count(*)::integer AS n
              FROM pairs AS x JOIN parent AS q ON q.id = x.p AND q.status <> 'dead'
             GROUP BY x.p) AS c
     WHERE t.id = c.p AND t.id = ANY(%(pair_parent)s::bigint[])
    RETURNING t.id
), live AS (
    SELECT x.j, x.p FROM pairs AS x JOIN marked AS m ON m.id = x.p
), job AS (
    INSERT INTO "pgqueue_jobs" ("id", "kind", "payload", "run_at", "max_attempts", "queue", "priority", "result_ttl", "limit_key", trace_context, status, waiting_on, parents)
    SELECT r.*, %(trace_context)s::text,
           CASE WHEN coalesce(w.n, 0) > 0 THEN 'waiting' ELSE 'pending' END, coalesce(w.n, 0),
           k.parents
      FROM unnest(%(id)s::bigint[], %(kind)s::text[], %(payload)s::jsonb[],
                  %(run_at)s::timestamptz[], %(max_attempts)s::integer[], %(queue)s::text[],
                  %(priority)s::smallint[], %(result_ttl)s::interval[], %(limit_key)s::text[])
           AS r(id, kind, payload, run_at, max_attempts, queue, priority, result_ttl, limit_key)
      LEFT JOIN (SELECT j, count(*)::integer AS n FROM live GROUP BY j) AS w ON w.j = r.id
      LEFT JOIN (SELECT x.j, jsonb_object_agg(x.p::text, v.value) AS parents
                   FROM pairs AS x
                   LEFT JOIN "pgqueue_jobs_results" AS v ON v.job_id = x.p AND v.outcome = 'succeeded'
                  GROUP BY x.j) AS k ON k.j = r.id
    RETURNING id, kind, status
), edges AS (
    INSERT INTO "pgqueue_jobs_dependencies" (parent_id, job_id) SELECT p, j FROM live
)
SELECT (SELECT count(*) FROM job),
       (SELECT coalesce(array_agg(id), '{}') FROM parent WHERE status = 'dead'),
       (SELECT count(pg_notify(%(channel)s, kind))
          FROM (SELECT DISTINCT kind FROM job WHERE status = 'pending') AS k)

-- ==== ensure_slots
INSERT INTO "pgqueue_jobs_limit_slots" (limit_key, slot) SELECT unnest(%(keys)s::text[]), 1
ON CONFLICT DO NOTHING

-- ==== expired
SELECT id, attempts, max_attempts, locked_by FROM "pgqueue_jobs"
 WHERE status = 'running' AND locked_at < now() - %s::interval
 ORDER BY id
 FOR UPDATE SKIP LOCKED

-- ==== explain_claim
EXPLAIN WITH
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens)
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked
 LIMIT 20 - (SELECT count(*) FROM limited)))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents"

-- ==== get
SELECT "id", "kind", "payload", "attempts", "max_attempts", "status", "run_at", "last_error", "locked_by", "locked_at", "created_at", "queue", "priority", "unique_key", extract(epoch FROM result_ttl)::float8 AS "result_ttl", "limit_key", cancel_requested_at IS NOT NULL AS "cancel_requested", "trace_context", "parents" FROM "pgqueue_jobs" WHERE id = %s

-- ==== heartbeat
UPDATE "pgqueue_jobs" SET locked_at = now()
 WHERE id = ANY(%s::bigint[]) AND status = 'running' AND locked_by = %s
RETURNING id, cancel_requested_at IS NOT NULL

-- ==== insert_arrays
INSERT INTO "pgqueue_jobs" ("id", "kind", "payload", "run_at", "max_attempts", "queue", "priority", "result_ttl", "limit_key", trace_context)
SELECT *, %s::text FROM unnest(%s::bigint[], %s::text[], %s::jsonb[], %s::timestamptz[],
                               %s::integer[], %s::text[], %s::smallint[], %s::interval[],
                               %s::text[])

-- ==== jobs
SELECT "id", "kind", "payload", "attempts", "max_attempts", "status", "run_at", "last_error", "locked_by", "locked_at", "created_at", "queue", "priority", "unique_key", extract(epoch FROM result_ttl)::float8 AS "result_ttl", "limit_key", cancel_requested_at IS NOT NULL AS "cancel_requested", "trace_context", "parents" FROM "pgqueue_jobs"
 WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
   AND (%(kinds)s::text[] IS NULL OR kind = ANY(%(kinds)s::text[]))
   AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
   AND (%(after_id)s::bigint IS NULL OR id > %(after_id)s::bigint)
 ORDER BY id
 LIMIT %(limit)s

-- ==== limit_states
WITH keys AS (
    SELECT limit_key FROM "pgqueue_jobs_limits" UNION SELECT DISTINCT limit_key FROM "pgqueue_jobs_limit_slots"
)
SELECT k.limit_key, m.max_running,
       (SELECT count(*) FROM "pgqueue_jobs_limit_slots" AS s WHERE s.limit_key = k.limit_key AND s.job_id IS NOT NULL),
       (SELECT count(*) FROM "pgqueue_jobs" AS t
         WHERE t.status = 'pending' AND t.limit_key = k.limit_key),
       m.per_second, m.burst,
       least(m.burst, m.tokens + m.per_second
             * extract(epoch FROM now() - m.refilled_at)::double precision)
  FROM keys AS k LEFT JOIN "pgqueue_jobs_limits" AS m ON m.limit_key = k.limit_key
 ORDER BY 1

-- ==== listen
LISTEN "pgqueue_jobs"

-- ==== listen_control
LISTEN "pgqueue_jobs:control"

-- ==== listen_results
LISTEN "pgqueue_jobs:results"

-- ==== notify_kinds
SELECT pg_notify(%s, k)::text FROM unnest(%s::text[]) AS k

-- ==== oldest_and_expired
SELECT (WITH RECURSIVE g AS (
            (SELECT queue, priority FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
              ORDER BY queue, priority LIMIT 1)
            UNION ALL
            SELECT n.queue, n.priority FROM g CROSS JOIN LATERAL (
                SELECT t.queue, t.priority FROM "pgqueue_jobs" AS t
                 WHERE t.status = 'pending' AND limit_key IS NULL AND (t.queue, t.priority) > (g.queue, g.priority)
                 ORDER BY t.queue, t.priority LIMIT 1) AS n
        )
        SELECT now() - min(f.run_at) FROM (SELECT queue, priority FROM g LIMIT %(groups)s) AS g
         CROSS JOIN LATERAL (
            SELECT t.run_at FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND limit_key IS NULL AND t.queue = g.queue AND t.priority = g.priority
             ORDER BY t.run_at LIMIT 1) AS f
         WHERE f.run_at <= now()),
       (SELECT count(*) FROM (
            SELECT 1 FROM "pgqueue_jobs"
             WHERE status = 'running' AND locked_at IS NOT NULL AND locked_at < now() - %(lease)s::interval
             ORDER BY locked_at LIMIT %(cap)s) AS s)

-- ==== orphan_claims[(False, False)]
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id IN (
       SELECT id FROM "pgqueue_jobs" AS o
        WHERE status = 'pending' AND run_at <= now() AND starts_with(last_error, 'lease expired') AND limit_key IS NULL
               
          AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = o.queue AND q.paused)
        ORDER BY priority DESC, run_at, id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED)
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents"

-- ==== orphan_claims[(False, True)]
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id IN (
       SELECT id FROM "pgqueue_jobs" AS o
        WHERE status = 'pending' AND run_at <= now() AND starts_with(last_error, 'lease expired') AND limit_key IS NULL
               AND kind = ANY(%(kinds)s::text[])
          AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = o.queue AND q.paused)
        ORDER BY priority DESC, run_at, id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED)
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents"

-- ==== orphan_claims[(True, False)]
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id IN (
       SELECT id FROM "pgqueue_jobs" AS o
        WHERE status = 'pending' AND run_at <= now() AND starts_with(last_error, 'lease expired') AND limit_key IS NULL
              AND queue = ANY(%(queues)s::text[]) 
          AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = o.queue AND q.paused)
        ORDER BY priority DESC, run_at, id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED)
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents"

-- ==== orphan_claims[(True, True)]
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id IN (
       SELECT id FROM "pgqueue_jobs" AS o
        WHERE status = 'pending' AND run_at <= now() AND starts_with(last_error, 'lease expired') AND limit_key IS NULL
              AND queue = ANY(%(queues)s::text[]) AND kind = ANY(%(kinds)s::text[])
          AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = o.queue AND q.paused)
        ORDER BY priority DESC, run_at, id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED)
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents"

-- ==== pause_records
SELECT queue, paused FROM "pgqueue_jobs_queues" ORDER BY queue LIMIT %s

-- ==== probe_uncommitted
INSERT INTO "pgqueue_jobs" (id, kind) VALUES (%(id)s, 'pgqueue.probe')
ON CONFLICT (id) DO NOTHING
RETURNING id / 0

-- ==== prune_history
WITH gone AS (DELETE FROM "pgqueue_jobs_history" WHERE finished_at < now() - %s::interval RETURNING 1)
SELECT count(*) FROM gone

-- ==== prune_leases
DELETE FROM "pgqueue_jobs_unique_leases" WHERE expires_at <= now() - interval '1 minute'

-- ==== prune_results
DELETE FROM "pgqueue_jobs_results"
 WHERE job_id = ANY(ARRAY(SELECT job_id FROM "pgqueue_jobs_results" WHERE expires_at <= now() LIMIT 10000))

-- ==== purge_dead
WITH purged AS (
    DELETE FROM "pgqueue_jobs"
     WHERE status = 'dead' AND run_at < now() - %(older_than)s::interval
       AND (%(kinds)s::text[] IS NULL OR kind = ANY(%(kinds)s::text[]))
    RETURNING "id"
)
SELECT count(*) FROM purged

-- ==== reap_lock
SELECT pg_try_advisory_xact_lock(hashtext('pgqueue:reap:' || %s))

-- ==== record_failures
WITH
failed_rows AS (
    UPDATE "pgqueue_jobs" AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error)
      FROM unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents),
failed_rows_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM failed_rows AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.claimed
    RETURNING s.slot, s.job_id),
failed_rows_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, d.status, NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows AS d
     WHERE d.result_ttl IS NOT NULL
       AND d.status = 'dead'
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed_rows_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, (d.status)::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN failed_rows AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND (d.status)::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
failed_rows_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM failed_rows_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM failed_rows_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
failed_rows_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING failed_rows_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
failed_rows_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j
      USING unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NOT NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              COALESCE(f.error, j.last_error) AS last_error),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled)
SELECT (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM failed_rows_results
                UNION ALL SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w)

-- ==== register_schedule
INSERT INTO "pgqueue_jobs_schedules" AS s (name, kind, cron, every, tz, payload, queue, priority, overlap,
                              last_tick)
VALUES (%(name)s, %(kind)s, %(cron)s, %(every)s::interval, %(tz)s, %(payload)s::jsonb,
        %(queue)s, %(priority)s, %(overlap)s, now())
ON CONFLICT (name) DO UPDATE
   SET kind = EXCLUDED.kind, cron = EXCLUDED.cron, every = EXCLUDED.every, tz = EXCLUDED.tz,
       payload = EXCLUDED.payload, queue = EXCLUDED.queue, priority = EXCLUDED.priority,
       overlap = EXCLUDED.overlap, last_tick = coalesce(s.last_tick, EXCLUDED.last_tick),
       updated_at = now()
 WHERE (s.kind, s.cron, s.every, s.tz, s.payload, s.queue, s.priority, s.overlap,
        s.last_tick IS NULL)
       IS DISTINCT FROM (EXCLUDED.kind, EXCLUDED.cron, EXCLUDED.every, EXCLUDED.tz,
                         EXCLUDED.payload, EXCLUDED.queue, EXCLUDED.priority, EXCLUDED.overlap,
                         false)

-- ==== result
SELECT status, NULL::jsonb, last_error, NULL::timestamptz FROM "pgqueue_jobs" WHERE id = %(id)s
UNION ALL
SELECT outcome, value, error, finished_at FROM "pgqueue_jobs_results"
 WHERE job_id = %(id)s AND expires_at > now()
   AND NOT EXISTS (SELECT FROM "pgqueue_jobs" WHERE id = %(id)s)

-- ==== retry
WITH revived AS (
UPDATE "pgqueue_jobs"
   SET status = 'pending', attempts = 0, run_at = now(), locked_at = NULL, locked_by = NULL
 WHERE id IN (
SELECT DISTINCT ON (t.unique_key, t.unique_scope, CASE WHEN t.unique_key IS NULL THEN t.id END)
       t.id FROM "pgqueue_jobs" AS t
 WHERE t.status = 'dead' AND t.id = ANY(%(ids)s::bigint[])
   AND NOT EXISTS (
       SELECT FROM "pgqueue_jobs" AS o
        WHERE o.unique_key = t.unique_key AND o.unique_scope = t.unique_scope AND o.id <> t.id
          AND ((o.unique_scope = 'queued' AND o.status = 'pending' AND o.attempts = 0)
               OR (o.unique_scope = 'active' AND o.status IN ('pending', 'running'))))
 ORDER BY t.unique_key, t.unique_scope, CASE WHEN t.unique_key IS NULL THEN t.id END,
          t.id DESC)
RETURNING id, kind)
SELECT id, pg_notify(%(channel)s, kind)::text FROM revived

-- ==== retry_dead
WITH revived AS (
UPDATE "pgqueue_jobs"
   SET status = 'pending', attempts = 0, run_at = now(), locked_at = NULL, locked_by = NULL
 WHERE id IN (
SELECT DISTINCT ON (t.unique_key, t.unique_scope, CASE WHEN t.unique_key IS NULL THEN t.id END)
       t.id FROM "pgqueue_jobs" AS t
 WHERE t.status = 'dead' AND (%(kinds)s::text[] IS NULL OR t.kind = ANY(%(kinds)s::text[]))
   AND NOT EXISTS (
       SELECT FROM "pgqueue_jobs" AS o
        WHERE o.unique_key = t.unique_key AND o.unique_scope = t.unique_scope AND o.id <> t.id
          AND ((o.unique_scope = 'queued' AND o.status = 'pending' AND o.attempts = 0)
               OR (o.unique_scope = 'active' AND o.status IN ('pending', 'running'))))
 ORDER BY t.unique_key, t.unique_scope, CASE WHEN t.unique_key IS NULL THEN t.id END,
          t.id DESC)
RETURNING id, kind), by_kind AS (
    SELECT kind, count(*) AS n FROM revived GROUP BY kind
)
SELECT coalesce(sum(n), 0)::bigint, count(pg_notify(%(channel)s, kind)) FROM by_kind

-- ==== schedule_clock
SELECT now(), coalesce(array_agg(name), '{}'), coalesce(array_agg(last_tick), '{}')
  FROM "pgqueue_jobs_schedules" WHERE name = ANY(%(names)s::text[])

-- ==== schedule_states
SELECT name, kind, cron, every, tz, payload, queue, priority, overlap, paused, last_tick,
       last_job_id, updated_at, now()
  FROM "pgqueue_jobs_schedules" ORDER BY name

-- ==== schedule_ticks[False]
WITH free AS MATERIALIZED (
    SELECT NOT EXISTS (SELECT FROM "pgqueue_jobs" WHERE unique_key = %(unique_key)s AND unique_scope = 'active' AND status IN ('pending', 'running')) AS free
), tick AS (
    UPDATE "pgqueue_jobs_schedules" AS s
       SET last_tick = %(tick)s,
           last_job_id = CASE WHEN s.paused OR NOT f.free THEN s.last_job_id
                         ELSE nextval(pg_get_serial_sequence(%(table)s, 'id')::regclass) END
      FROM free AS f
     WHERE s.name = %(name)s AND s.last_tick < %(tick)s
    RETURNING s.paused, f.free, s.last_job_id
), job AS (
    INSERT INTO "pgqueue_jobs" (id, kind, payload, run_at, queue, priority, unique_key, unique_scope)
    SELECT last_job_id, %(kind)s, %(payload)s::jsonb, %(tick)s, %(queue)s, %(priority)s,
           %(unique_key)s, 'active'
      FROM tick WHERE NOT paused AND free
    ON CONFLICT (unique_key) WHERE unique_scope = 'active' AND status IN ('pending', 'running') DO NOTHING
    RETURNING id, kind
)
SELECT EXISTS (SELECT FROM tick), coalesce((SELECT paused FROM tick), false),
       (SELECT id FROM job), now(), (SELECT pg_notify(%(channel)s, kind)::text FROM job)

-- ==== schedule_ticks[True]
WITH free AS MATERIALIZED (
    SELECT true AS free
), tick AS (
    UPDATE "pgqueue_jobs_schedules" AS s
       SET last_tick = %(tick)s,
           last_job_id = CASE WHEN s.paused OR NOT f.free THEN s.last_job_id
                         ELSE nextval(pg_get_serial_sequence(%(table)s, 'id')::regclass) END
      FROM free AS f
     WHERE s.name = %(name)s AND s.last_tick < %(tick)s
    RETURNING s.paused, f.free, s.last_job_id
), job AS (
    INSERT INTO "pgqueue_jobs" (id, kind, payload, run_at, queue, priority, unique_key, unique_scope)
    SELECT last_job_id, %(kind)s, %(payload)s::jsonb, %(tick)s, %(queue)s, %(priority)s,
           NULL, NULL
      FROM tick WHERE NOT paused AND free
    RETURNING id, kind
)
SELECT EXISTS (SELECT FROM tick), coalesce((SELECT paused FROM tick), false),
       (SELECT id FROM job), now(), (SELECT pg_notify(%(channel)s, kind)::text FROM job)

-- ==== set_limit
WITH limit_row AS (
    INSERT INTO "pgqueue_jobs_limits" AS m (limit_key, max_running) VALUES (%(key)s, %(n)s)
    ON CONFLICT (limit_key) DO UPDATE SET max_running = EXCLUDED.max_running, changed_at = now()
    RETURNING 1
), added AS (
    INSERT INTO "pgqueue_jobs_limit_slots" (limit_key, slot) SELECT %(key)s, generate_series(1, %(n)s)
    ON CONFLICT DO NOTHING RETURNING 1
), removed AS (
    DELETE FROM "pgqueue_jobs_limit_slots" WHERE limit_key = %(key)s AND slot > %(n)s AND job_id IS NULL RETURNING 1
)
SELECT (SELECT count(*) FROM limit_row), (SELECT count(*) FROM added),
       (SELECT count(*) FROM removed), pg_notify(%(channel)s, '')

-- ==== set_local
SELECT set_config(%s, %s, true)

-- ==== set_paused
INSERT INTO "pgqueue_jobs_queues" AS q (queue, paused) VALUES (%(queue)s, %(paused)s)
ON CONFLICT (queue) DO UPDATE SET paused = EXCLUDED.paused, changed_at = now()
RETURNING queue, CASE WHEN NOT paused THEN pg_notify(%(channel)s, '') END

-- ==== set_rate
WITH rate_row AS (
    INSERT INTO "pgqueue_jobs_limits" AS m (limit_key, max_running, per_second, burst, tokens, refilled_at)
    VALUES (%(key)s, NULL, %(per_second)s::double precision, %(burst)s::integer,
            %(burst)s::integer, now())
    ON CONFLICT (limit_key) DO UPDATE
       SET per_second = EXCLUDED.per_second, burst = EXCLUDED.burst,
           tokens = CASE WHEN m.per_second IS NULL OR EXCLUDED.per_second IS NULL
                         THEN EXCLUDED.tokens
                         ELSE least(EXCLUDED.burst, m.tokens + m.per_second
                                    * extract(epoch FROM now() - m.refilled_at)::double precision)
                    END,
           refilled_at = EXCLUDED.refilled_at, changed_at = now()
    RETURNING 1
), first_slot AS (
    INSERT INTO "pgqueue_jobs_limit_slots" (limit_key, slot) VALUES (%(key)s, 1) ON CONFLICT DO NOTHING RETURNING 1
)
SELECT (SELECT count(*) FROM rate_row), (SELECT count(*) FROM first_slot),
       pg_notify(%(channel)s, '')

-- ==== set_schedule_paused
UPDATE "pgqueue_jobs_schedules"
   SET paused = %(paused)s,
       last_tick = CASE WHEN paused AND NOT %(paused)s THEN greatest(last_tick, now())
                   ELSE last_tick END
 WHERE name = %(name)s
RETURNING name

-- ==== sized
SELECT count(*) FROM (SELECT 1 FROM "pgqueue_jobs" LIMIT %s) AS s

-- ==== stats
SELECT queue, priority, kind, status, count(*),
       now() - min(run_at) FILTER (WHERE status = 'pending' AND run_at <= now()),
       count(*) FILTER (WHERE status = 'running' AND locked_at < now() - %s::interval)
  FROM "pgqueue_jobs"
 GROUP BY queue, priority, kind, status

-- ==== status_estimates[dead]
EXPLAIN (FORMAT JSON) SELECT 1 FROM "pgqueue_jobs" WHERE status = 'dead'

-- ==== status_estimates[pending]
EXPLAIN (FORMAT JSON) SELECT 1 FROM "pgqueue_jobs" WHERE status = 'pending'

-- ==== status_estimates[running]
EXPLAIN (FORMAT JSON) SELECT 1 FROM "pgqueue_jobs" WHERE status = 'running'

-- ==== status_estimates[waiting]
EXPLAIN (FORMAT JSON) SELECT 1 FROM "pgqueue_jobs" WHERE status = 'waiting'

-- ==== table_estimate
EXPLAIN (FORMAT JSON) SELECT 1 FROM "pgqueue_jobs"

-- ==== trigger_schedule
WITH s AS (
    SELECT kind, payload, queue, priority, overlap FROM "pgqueue_jobs_schedules" WHERE name = %(name)s
), job AS (
    INSERT INTO "pgqueue_jobs" (kind, payload, queue, priority, unique_key, unique_scope)
    SELECT kind, payload, queue, priority, CASE WHEN overlap THEN NULL ELSE %(unique_key)s END,
           CASE WHEN overlap THEN NULL ELSE 'active' END
      FROM s
    ON CONFLICT (unique_key) WHERE unique_scope = 'active' AND status IN ('pending', 'running') DO NOTHING
    RETURNING id, kind
)
SELECT EXISTS (SELECT FROM s), (SELECT id FROM job),
       (SELECT pg_notify(%(channel)s, kind)::text FROM job)

-- ==== unique_holders[active]
SELECT id FROM "pgqueue_jobs" WHERE unique_key = %(unique_key)s AND unique_scope = 'active' AND status IN ('pending', 'running')

-- ==== unique_holders[queued]
SELECT id FROM "pgqueue_jobs" WHERE unique_key = %(unique_key)s AND unique_scope = 'queued' AND status = 'pending' AND attempts = 0

-- ==== unique_inserts[('active', False)]
WITH job AS (
    INSERT INTO "pgqueue_jobs" (kind, payload, run_at, max_attempts, queue, priority,
                         unique_key, unique_scope, result_ttl, limit_key, trace_context)
    VALUES (%(kind)s, %(payload)s::jsonb,
            COALESCE(%(run_at)s::timestamptz, now() + %(delay)s::interval), %(max_attempts)s,
            %(queue)s, %(priority)s, %(unique_key)s, 'active', %(result_ttl)s::interval,
            %(limit_key)s, %(trace_context)s)
    ON CONFLICT (unique_key) WHERE unique_scope = 'active' AND status IN ('pending', 'running') DO NOTHING
    RETURNING id, kind
)
SELECT id, pg_notify(%(channel)s, kind)::text FROM job

-- ==== unique_inserts[('active', True)]
WITH job AS (
    INSERT INTO "pgqueue_jobs" (kind, payload, run_at, max_attempts, queue, priority,
                         unique_key, unique_scope, result_ttl, limit_key, trace_context)
    VALUES (%(kind)s, %(payload)s::jsonb,
            COALESCE(%(run_at)s::timestamptz, now() + %(delay)s::interval), %(max_attempts)s,
            %(queue)s, %(priority)s, %(unique_key)s, 'active', %(result_ttl)s::interval,
            %(limit_key)s, %(trace_context)s)
    ON CONFLICT (unique_key) WHERE unique_scope = 'active' AND status IN ('pending', 'running') DO UPDATE SET payload = EXCLUDED.payload, run_at = EXCLUDED.run_at,
                  trace_context = EXCLUDED.trace_context
     WHERE "pgqueue_jobs".status = 'pending'
    RETURNING id, kind
)
SELECT id, pg_notify(%(channel)s, kind)::text FROM job

-- ==== unique_inserts[('queued', False)]
WITH job AS (
    INSERT INTO "pgqueue_jobs" (kind, payload, run_at, max_attempts, queue, priority,
                         unique_key, unique_scope, result_ttl, limit_key, trace_context)
    VALUES (%(kind)s, %(payload)s::jsonb,
            COALESCE(%(run_at)s::timestamptz, now() + %(delay)s::interval), %(max_attempts)s,
            %(queue)s, %(priority)s, %(unique_key)s, 'queued', %(result_ttl)s::interval,
            %(limit_key)s, %(trace_context)s)
    ON CONFLICT (unique_key) WHERE unique_scope = 'queued' AND status = 'pending' AND attempts = 0 DO NOTHING
    RETURNING id, kind
)
SELECT id, pg_notify(%(channel)s, kind)::text FROM job

-- ==== unique_inserts[('queued', True)]
WITH job AS (
    INSERT INTO "pgqueue_jobs" (kind, payload, run_at, max_attempts, queue, priority,
                         unique_key, unique_scope, result_ttl, limit_key, trace_context)
    VALUES (%(kind)s, %(payload)s::jsonb,
            COALESCE(%(run_at)s::timestamptz, now() + %(delay)s::interval), %(max_attempts)s,
            %(queue)s, %(priority)s, %(unique_key)s, 'queued', %(result_ttl)s::interval,
            %(limit_key)s, %(trace_context)s)
    ON CONFLICT (unique_key) WHERE unique_scope = 'queued' AND status = 'pending' AND attempts = 0 DO UPDATE SET payload = EXCLUDED.payload, run_at = EXCLUDED.run_at,
                  trace_context = EXCLUDED.trace_context
     WHERE "pgqueue_jobs".status = 'pending'
    RETURNING id, kind
)
SELECT id, pg_notify(%(channel)s, kind)::text FROM job

-- ==== window_holder
SELECT job_id FROM "pgqueue_jobs_unique_leases" WHERE unique_key = %(unique_key)s AND expires_at > now()

-- ==== window_insert
WITH lease AS (
    INSERT INTO "pgqueue_jobs_unique_leases" AS l (unique_key, job_id, expires_at)
    VALUES (%(unique_key)s, nextval(pg_get_serial_sequence(%(table)s, 'id')::regclass),
            now() + %(window)s::interval)
    ON CONFLICT (unique_key) DO UPDATE
       SET job_id = EXCLUDED.job_id, expires_at = EXCLUDED.expires_at
     WHERE l.expires_at <= now()
    RETURNING job_id
), job AS (
    INSERT INTO "pgqueue_jobs" (id, kind, payload, run_at, max_attempts, queue, priority,
                         unique_key, unique_scope, result_ttl, limit_key, trace_context)
    SELECT job_id, %(kind)s, %(payload)s::jsonb,
           COALESCE(%(run_at)s::timestamptz, now() + %(delay)s::interval), %(max_attempts)s,
           %(queue)s, %(priority)s, %(unique_key)s, 'window', %(result_ttl)s::interval,
           %(limit_key)s, %(trace_context)s
      FROM lease
    RETURNING id, kind
)
SELECT id, pg_notify(%(channel)s, kind)::text FROM job

-- ==== window_replace
WITH job AS (
    UPDATE "pgqueue_jobs"
       SET payload = %(payload)s::jsonb,
           run_at = COALESCE(%(run_at)s::timestamptz, now() + %(delay)s::interval),
           trace_context = %(trace_context)s
     WHERE id = %(existing)s AND status = 'pending'
    RETURNING id, kind
)
SELECT id, pg_notify(%(channel)s, kind)::text FROM job

-- ==== worker_turn
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 100
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens),
failed_rows AS (
    UPDATE "pgqueue_jobs" AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error)
      FROM unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents),
failed_rows_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM failed_rows AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.claimed
    RETURNING s.slot, s.job_id),
failed_rows_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, d.status, NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows AS d
     WHERE d.result_ttl IS NOT NULL
       AND d.status = 'dead'
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed_rows_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, (d.status)::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN failed_rows AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND (d.status)::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
failed_rows_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM failed_rows_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM failed_rows_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
failed_rows_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING failed_rows_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
failed_rows_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j
      USING unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NOT NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              COALESCE(f.error, j.last_error) AS last_error),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s
       AND (dependents IS NULL
            OR dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = "pgqueue_jobs".id))
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
done_slots AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM "pgqueue_jobs_limit_slots" AS s, done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
       AND s.slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                WHERE m.limit_key = s.limit_key), 1)
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                        WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                          AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                  WHERE m.limit_key = s.limit_key), 1))
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                        WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL)),
done_handed AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT limit_key, count(*) AS free FROM done_slots GROUP BY limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
                      AND t.id <> ALL(ARRAY(SELECT id FROM limited))
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN done_slots AS f ON f.limit_key = k.limit_key AND f.n = x.n),
done_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET (job_id, attempt, taken_at) = (SELECT h.id, h.attempts + 1, now() FROM done_handed AS h
                                           WHERE h.limit_key = s.limit_key AND h.slot = s.slot)
      FROM done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
done_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'succeeded', v.value, NULL, d.attempts, now() + d.result_ttl
      FROM done AS d
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
done_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING done AS d
     WHERE d.dependents IS NOT NULL AND e.parent_id = d.id
    RETURNING e.parent_id, e.job_id),
done_released AS (
    UPDATE "pgqueue_jobs" AS j
       SET waiting_on = j.waiting_on - r.n,
           status = CASE WHEN j.waiting_on > r.n THEN 'waiting' ELSE 'pending' END,
           run_at = CASE WHEN j.waiting_on > r.n THEN j.run_at ELSE greatest(j.run_at, now()) END,
           parents = coalesce(j.parents, '{}') || r.kept
      FROM (SELECT e.job_id, count(*)::integer AS n,
                   coalesce(jsonb_object_agg(e.parent_id::text, v.value)
                              FILTER (WHERE v.value IS NOT NULL), '{}') AS kept
              FROM done_edges AS e
              LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value)
                     ON v.id = e.parent_id
             GROUP BY e.job_id ORDER BY e.job_id) AS r
     WHERE j.id = r.job_id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT job_id FROM done_edges))
       AND j.id <> ALL(ARRAY(SELECT id FROM failed_rows_below UNION ALL SELECT id FROM cancelled_below))
    RETURNING j.id,
              CASE WHEN j.status = 'pending' THEN pg_notify('pgqueue_jobs', j.kind)::text END),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(SELECT id FROM done_handed) || ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 100
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 100) AS x
     LIMIT 100)
SELECT id FROM picked
 LIMIT greatest(0, 100 - (SELECT count(*) FROM limited) - (SELECT count(*) FROM done_handed))))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM done_results
                UNION ALL SELECT job_id FROM failed_rows_results
                UNION ALL SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM done_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       (SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1),
       (SELECT count(*) FROM (SELECT slot FROM done_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== worker_turn_with_heads
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
heads(queue, priority, run_at, id) AS (
    SELECT * FROM jsonb_to_recordset(%(heads)s::jsonb)
        AS h(queue text, priority smallint, run_at timestamptz, id bigint)),
found(queue) AS (
    SELECT CASE WHEN z.queue IS NULL THEN
           (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL)
         ELSE coalesce(
           (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND (queue, priority) < (z.queue, z.priority)),
           z.queue) END
      FROM (SELECT (SELECT h.queue FROM heads AS h
                     ORDER BY h.queue, h.priority LIMIT 1) AS queue,
                   (SELECT h.priority FROM heads AS h
                     ORDER BY h.queue, h.priority LIMIT 1) AS priority) AS z
  UNION ALL
    SELECT CASE WHEN z.queue IS NULL THEN
           (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue > f.queue)
         ELSE coalesce(
           (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue > f.queue
               AND (queue, priority) < (z.queue, z.priority)),
           z.queue) END
      FROM found AS f
      LEFT JOIN LATERAL (SELECT h.queue, h.priority FROM heads AS h WHERE h.queue > f.queue
                          ORDER BY h.queue, h.priority LIMIT 1) AS z ON true
     WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT l.queue, coalesce(
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority
               AND (priority, run_at, id) > (coalesce(z.priority, (-32768)::smallint),
                                             coalesce(z.run_at, '-infinity'::timestamptz),
                                             coalesce(z.id, 0::bigint))),
           z.priority)
      FROM (SELECT queue, 32767::smallint AS priority FROM served) AS l
      LEFT JOIN LATERAL (SELECT h.priority, h.run_at, h.id FROM heads AS h
                          WHERE h.queue = l.queue AND h.priority < l.priority
                          ORDER BY h.priority DESC LIMIT 1) AS z ON true
  UNION ALL
    SELECT l.queue, coalesce(
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority
               AND (priority, run_at, id) > (coalesce(z.priority, (-32768)::smallint),
                                             coalesce(z.run_at, '-infinity'::timestamptz),
                                             coalesce(z.id, 0::bigint))),
           z.priority)
      FROM levels AS l
      LEFT JOIN LATERAL (SELECT h.priority, h.run_at, h.id FROM heads AS h
                          WHERE h.queue = l.queue AND h.priority < l.priority
                          ORDER BY h.priority DESC LIMIT 1) AS z ON true
     WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
             LEFT JOIN heads AS h ON h.queue = l.queue AND h.priority = l.priority
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND (run_at, id) > (coalesce(h.run_at, '-infinity'::timestamptz),
                                         coalesce(h.id, 0::bigint))
                     AND run_at <= now()
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 100
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 100) AS x
     LIMIT 100)
SELECT id FROM picked))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       0,
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       0,
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== claim_for(queues=False kinds=False limited=False)
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents"

-- ==== claim_for(queues=False kinds=False limited=True)
WITH
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens)
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked
 LIMIT 20 - (SELECT count(*) FROM limited)))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents"

-- ==== claim_for(queues=False kinds=True limited=False)
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents"

-- ==== claim_for(queues=False kinds=True limited=True)
WITH
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.kind = ANY(%(kinds)s::text[])
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.kind = ANY(%(kinds)s::text[])
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.kind = ANY(%(kinds)s::text[])
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens)
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked
 LIMIT 20 - (SELECT count(*) FROM limited)))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents"

-- ==== claim_for(queues=True kinds=False limited=False)
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents"

-- ==== claim_for(queues=True kinds=False limited=True)
WITH
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[])
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[])
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[])
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens)
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked
 LIMIT 20 - (SELECT count(*) FROM limited)))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents"

-- ==== claim_for(queues=True kinds=True limited=False)
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents"

-- ==== claim_for(queues=True kinds=True limited=True)
WITH
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens)
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked
 LIMIT 20 - (SELECT count(*) FROM limited)))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents"

-- ==== turn(queues=False kinds=False budget=False limited=False failures=False plain=False limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s
       AND (dependents IS NULL
            OR dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = "pgqueue_jobs".id))
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
done_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
done_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'succeeded', v.value, NULL, d.attempts, now() + d.result_ttl
      FROM done AS d
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
done_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING done AS d
     WHERE d.dependents IS NOT NULL AND e.parent_id = d.id
    RETURNING e.parent_id, e.job_id),
done_released AS (
    UPDATE "pgqueue_jobs" AS j
       SET waiting_on = j.waiting_on - r.n,
           status = CASE WHEN j.waiting_on > r.n THEN 'waiting' ELSE 'pending' END,
           run_at = CASE WHEN j.waiting_on > r.n THEN j.run_at ELSE greatest(j.run_at, now()) END,
           parents = coalesce(j.parents, '{}') || r.kept
      FROM (SELECT e.job_id, count(*)::integer AS n,
                   coalesce(jsonb_object_agg(e.parent_id::text, v.value)
                              FILTER (WHERE v.value IS NOT NULL), '{}') AS kept
              FROM done_edges AS e
              LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value)
                     ON v.id = e.parent_id
             GROUP BY e.job_id ORDER BY e.job_id) AS r
     WHERE j.id = r.job_id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT job_id FROM done_edges))
    RETURNING j.id,
              CASE WHEN j.status = 'pending' THEN pg_notify('pgqueue_jobs', j.kind)::text END),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM done_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM done_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       (SELECT count(*) FROM (SELECT slot FROM done_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=False kinds=False budget=False limited=False failures=False plain=True limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       0,
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       0,
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=False kinds=False budget=False limited=False failures=True plain=False limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed_rows AS (
    UPDATE "pgqueue_jobs" AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error)
      FROM unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents),
failed_rows_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM failed_rows AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.claimed
    RETURNING s.slot, s.job_id),
failed_rows_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, d.status, NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows AS d
     WHERE d.result_ttl IS NOT NULL
       AND d.status = 'dead'
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed_rows_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, (d.status)::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN failed_rows AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND (d.status)::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
failed_rows_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM failed_rows_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM failed_rows_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
failed_rows_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING failed_rows_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
failed_rows_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j
      USING unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NOT NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              COALESCE(f.error, j.last_error) AS last_error),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s
       AND (dependents IS NULL
            OR dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = "pgqueue_jobs".id))
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
done_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
done_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'succeeded', v.value, NULL, d.attempts, now() + d.result_ttl
      FROM done AS d
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
done_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING done AS d
     WHERE d.dependents IS NOT NULL AND e.parent_id = d.id
    RETURNING e.parent_id, e.job_id),
done_released AS (
    UPDATE "pgqueue_jobs" AS j
       SET waiting_on = j.waiting_on - r.n,
           status = CASE WHEN j.waiting_on > r.n THEN 'waiting' ELSE 'pending' END,
           run_at = CASE WHEN j.waiting_on > r.n THEN j.run_at ELSE greatest(j.run_at, now()) END,
           parents = coalesce(j.parents, '{}') || r.kept
      FROM (SELECT e.job_id, count(*)::integer AS n,
                   coalesce(jsonb_object_agg(e.parent_id::text, v.value)
                              FILTER (WHERE v.value IS NOT NULL), '{}') AS kept
              FROM done_edges AS e
              LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value)
                     ON v.id = e.parent_id
             GROUP BY e.job_id ORDER BY e.job_id) AS r
     WHERE j.id = r.job_id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT job_id FROM done_edges))
       AND j.id <> ALL(ARRAY(SELECT id FROM failed_rows_below UNION ALL SELECT id FROM cancelled_below))
    RETURNING j.id,
              CASE WHEN j.status = 'pending' THEN pg_notify('pgqueue_jobs', j.kind)::text END),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM done_results
                UNION ALL SELECT job_id FROM failed_rows_results
                UNION ALL SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM done_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       (SELECT count(*) FROM (SELECT slot FROM done_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=False kinds=False budget=False limited=False failures=True plain=True limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed_rows AS (
    UPDATE "pgqueue_jobs" AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error)
      FROM unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents),
failed_rows_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM failed_rows AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.claimed
    RETURNING s.slot, s.job_id),
failed_rows_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, d.status, NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows AS d
     WHERE d.result_ttl IS NOT NULL
       AND d.status = 'dead'
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed_rows_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, (d.status)::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN failed_rows AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND (d.status)::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
failed_rows_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM failed_rows_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM failed_rows_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
failed_rows_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING failed_rows_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
failed_rows_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j
      USING unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NOT NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              COALESCE(f.error, j.last_error) AS last_error),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM failed_rows_results
                UNION ALL SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       (SELECT count(*) FROM (SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=False kinds=False budget=False limited=True failures=False plain=False limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s
       AND (dependents IS NULL
            OR dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = "pgqueue_jobs".id))
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
done_slots AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM "pgqueue_jobs_limit_slots" AS s, done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
       AND s.slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                WHERE m.limit_key = s.limit_key), 1)
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                        WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                          AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                  WHERE m.limit_key = s.limit_key), 1))
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                        WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL)),
done_handed AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT limit_key, count(*) AS free FROM done_slots GROUP BY limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
                      AND t.id <> ALL(ARRAY(SELECT id FROM limited))
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN done_slots AS f ON f.limit_key = k.limit_key AND f.n = x.n),
done_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET (job_id, attempt, taken_at) = (SELECT h.id, h.attempts + 1, now() FROM done_handed AS h
                                           WHERE h.limit_key = s.limit_key AND h.slot = s.slot)
      FROM done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
done_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'succeeded', v.value, NULL, d.attempts, now() + d.result_ttl
      FROM done AS d
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
done_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING done AS d
     WHERE d.dependents IS NOT NULL AND e.parent_id = d.id
    RETURNING e.parent_id, e.job_id),
done_released AS (
    UPDATE "pgqueue_jobs" AS j
       SET waiting_on = j.waiting_on - r.n,
           status = CASE WHEN j.waiting_on > r.n THEN 'waiting' ELSE 'pending' END,
           run_at = CASE WHEN j.waiting_on > r.n THEN j.run_at ELSE greatest(j.run_at, now()) END,
           parents = coalesce(j.parents, '{}') || r.kept
      FROM (SELECT e.job_id, count(*)::integer AS n,
                   coalesce(jsonb_object_agg(e.parent_id::text, v.value)
                              FILTER (WHERE v.value IS NOT NULL), '{}') AS kept
              FROM done_edges AS e
              LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value)
                     ON v.id = e.parent_id
             GROUP BY e.job_id ORDER BY e.job_id) AS r
     WHERE j.id = r.job_id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT job_id FROM done_edges))
    RETURNING j.id,
              CASE WHEN j.status = 'pending' THEN pg_notify('pgqueue_jobs', j.kind)::text END),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(SELECT id FROM done_handed) || ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked
 LIMIT greatest(0, 20 - (SELECT count(*) FROM limited) - (SELECT count(*) FROM done_handed))))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM done_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM done_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       (SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1),
       (SELECT count(*) FROM (SELECT slot FROM done_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=False kinds=False budget=False limited=True failures=False plain=True limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked
 LIMIT 20 - (SELECT count(*) FROM limited)))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       0,
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       (SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1),
       0,
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=False kinds=False budget=False limited=True failures=True plain=False limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens),
failed_rows AS (
    UPDATE "pgqueue_jobs" AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error)
      FROM unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents),
failed_rows_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM failed_rows AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.claimed
    RETURNING s.slot, s.job_id),
failed_rows_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, d.status, NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows AS d
     WHERE d.result_ttl IS NOT NULL
       AND d.status = 'dead'
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed_rows_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, (d.status)::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN failed_rows AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND (d.status)::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
failed_rows_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM failed_rows_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM failed_rows_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
failed_rows_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING failed_rows_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
failed_rows_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j
      USING unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NOT NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              COALESCE(f.error, j.last_error) AS last_error),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s
       AND (dependents IS NULL
            OR dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = "pgqueue_jobs".id))
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
done_slots AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM "pgqueue_jobs_limit_slots" AS s, done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
       AND s.slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                WHERE m.limit_key = s.limit_key), 1)
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                        WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                          AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                  WHERE m.limit_key = s.limit_key), 1))
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                        WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL)),
done_handed AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT limit_key, count(*) AS free FROM done_slots GROUP BY limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
                      AND t.id <> ALL(ARRAY(SELECT id FROM limited))
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN done_slots AS f ON f.limit_key = k.limit_key AND f.n = x.n),
done_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET (job_id, attempt, taken_at) = (SELECT h.id, h.attempts + 1, now() FROM done_handed AS h
                                           WHERE h.limit_key = s.limit_key AND h.slot = s.slot)
      FROM done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
done_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'succeeded', v.value, NULL, d.attempts, now() + d.result_ttl
      FROM done AS d
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
done_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING done AS d
     WHERE d.dependents IS NOT NULL AND e.parent_id = d.id
    RETURNING e.parent_id, e.job_id),
done_released AS (
    UPDATE "pgqueue_jobs" AS j
       SET waiting_on = j.waiting_on - r.n,
           status = CASE WHEN j.waiting_on > r.n THEN 'waiting' ELSE 'pending' END,
           run_at = CASE WHEN j.waiting_on > r.n THEN j.run_at ELSE greatest(j.run_at, now()) END,
           parents = coalesce(j.parents, '{}') || r.kept
      FROM (SELECT e.job_id, count(*)::integer AS n,
                   coalesce(jsonb_object_agg(e.parent_id::text, v.value)
                              FILTER (WHERE v.value IS NOT NULL), '{}') AS kept
              FROM done_edges AS e
              LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value)
                     ON v.id = e.parent_id
             GROUP BY e.job_id ORDER BY e.job_id) AS r
     WHERE j.id = r.job_id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT job_id FROM done_edges))
       AND j.id <> ALL(ARRAY(SELECT id FROM failed_rows_below UNION ALL SELECT id FROM cancelled_below))
    RETURNING j.id,
              CASE WHEN j.status = 'pending' THEN pg_notify('pgqueue_jobs', j.kind)::text END),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(SELECT id FROM done_handed) || ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked
 LIMIT greatest(0, 20 - (SELECT count(*) FROM limited) - (SELECT count(*) FROM done_handed))))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM done_results
                UNION ALL SELECT job_id FROM failed_rows_results
                UNION ALL SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM done_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       (SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1),
       (SELECT count(*) FROM (SELECT slot FROM done_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=False kinds=False budget=False limited=True failures=True plain=True limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens),
failed_rows AS (
    UPDATE "pgqueue_jobs" AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error)
      FROM unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents),
failed_rows_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM failed_rows AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.claimed
    RETURNING s.slot, s.job_id),
failed_rows_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, d.status, NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows AS d
     WHERE d.result_ttl IS NOT NULL
       AND d.status = 'dead'
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed_rows_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, (d.status)::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN failed_rows AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND (d.status)::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
failed_rows_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM failed_rows_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM failed_rows_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
failed_rows_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING failed_rows_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
failed_rows_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j
      USING unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NOT NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              COALESCE(f.error, j.last_error) AS last_error),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked
 LIMIT 20 - (SELECT count(*) FROM limited)))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM failed_rows_results
                UNION ALL SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       (SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1),
       (SELECT count(*) FROM (SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=False kinds=False budget=True limited=False failures=False plain=False limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s
       AND (dependents IS NULL
            OR dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = "pgqueue_jobs".id))
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
done_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
done_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'succeeded', v.value, NULL, d.attempts, now() + d.result_ttl
      FROM done AS d
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
done_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING done AS d
     WHERE d.dependents IS NOT NULL AND e.parent_id = d.id
    RETURNING e.parent_id, e.job_id),
done_released AS (
    UPDATE "pgqueue_jobs" AS j
       SET waiting_on = j.waiting_on - r.n,
           status = CASE WHEN j.waiting_on > r.n THEN 'waiting' ELSE 'pending' END,
           run_at = CASE WHEN j.waiting_on > r.n THEN j.run_at ELSE greatest(j.run_at, now()) END,
           parents = coalesce(j.parents, '{}') || r.kept
      FROM (SELECT e.job_id, count(*)::integer AS n,
                   coalesce(jsonb_object_agg(e.parent_id::text, v.value)
                              FILTER (WHERE v.value IS NOT NULL), '{}') AS kept
              FROM done_edges AS e
              LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value)
                     ON v.id = e.parent_id
             GROUP BY e.job_id ORDER BY e.job_id) AS r
     WHERE j.id = r.job_id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT job_id FROM done_edges))
    RETURNING j.id,
              CASE WHEN j.status = 'pending' THEN pg_notify('pgqueue_jobs', j.kind)::text END),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, CASE WHEN pg_column_size(payload) < 2048 AND pg_column_compression(payload) IS NULL THEN pg_column_size(payload) ELSE octet_length(payload::text) END AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM (
    SELECT id, sum(size) OVER (ORDER BY priority DESC, run_at, id) - size AS before
      FROM picked) AS sized
 WHERE before < %(claim_bytes)s))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM done_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM done_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       (SELECT count(*) FROM (SELECT slot FROM done_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=False kinds=False budget=True limited=False failures=False plain=True limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, CASE WHEN pg_column_size(payload) < 2048 AND pg_column_compression(payload) IS NULL THEN pg_column_size(payload) ELSE octet_length(payload::text) END AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM (
    SELECT id, sum(size) OVER (ORDER BY priority DESC, run_at, id) - size AS before
      FROM picked) AS sized
 WHERE before < %(claim_bytes)s))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       0,
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       0,
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=False kinds=False budget=True limited=False failures=True plain=False limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed_rows AS (
    UPDATE "pgqueue_jobs" AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error)
      FROM unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents),
failed_rows_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM failed_rows AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.claimed
    RETURNING s.slot, s.job_id),
failed_rows_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, d.status, NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows AS d
     WHERE d.result_ttl IS NOT NULL
       AND d.status = 'dead'
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed_rows_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, (d.status)::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN failed_rows AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND (d.status)::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
failed_rows_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM failed_rows_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM failed_rows_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
failed_rows_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING failed_rows_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
failed_rows_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j
      USING unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NOT NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              COALESCE(f.error, j.last_error) AS last_error),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s
       AND (dependents IS NULL
            OR dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = "pgqueue_jobs".id))
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
done_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
done_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'succeeded', v.value, NULL, d.attempts, now() + d.result_ttl
      FROM done AS d
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
done_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING done AS d
     WHERE d.dependents IS NOT NULL AND e.parent_id = d.id
    RETURNING e.parent_id, e.job_id),
done_released AS (
    UPDATE "pgqueue_jobs" AS j
       SET waiting_on = j.waiting_on - r.n,
           status = CASE WHEN j.waiting_on > r.n THEN 'waiting' ELSE 'pending' END,
           run_at = CASE WHEN j.waiting_on > r.n THEN j.run_at ELSE greatest(j.run_at, now()) END,
           parents = coalesce(j.parents, '{}') || r.kept
      FROM (SELECT e.job_id, count(*)::integer AS n,
                   coalesce(jsonb_object_agg(e.parent_id::text, v.value)
                              FILTER (WHERE v.value IS NOT NULL), '{}') AS kept
              FROM done_edges AS e
              LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value)
                     ON v.id = e.parent_id
             GROUP BY e.job_id ORDER BY e.job_id) AS r
     WHERE j.id = r.job_id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT job_id FROM done_edges))
       AND j.id <> ALL(ARRAY(SELECT id FROM failed_rows_below UNION ALL SELECT id FROM cancelled_below))
    RETURNING j.id,
              CASE WHEN j.status = 'pending' THEN pg_notify('pgqueue_jobs', j.kind)::text END),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, CASE WHEN pg_column_size(payload) < 2048 AND pg_column_compression(payload) IS NULL THEN pg_column_size(payload) ELSE octet_length(payload::text) END AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM (
    SELECT id, sum(size) OVER (ORDER BY priority DESC, run_at, id) - size AS before
      FROM picked) AS sized
 WHERE before < %(claim_bytes)s))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM done_results
                UNION ALL SELECT job_id FROM failed_rows_results
                UNION ALL SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM done_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       (SELECT count(*) FROM (SELECT slot FROM done_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=False kinds=False budget=True limited=False failures=True plain=True limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed_rows AS (
    UPDATE "pgqueue_jobs" AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error)
      FROM unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents),
failed_rows_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM failed_rows AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.claimed
    RETURNING s.slot, s.job_id),
failed_rows_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, d.status, NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows AS d
     WHERE d.result_ttl IS NOT NULL
       AND d.status = 'dead'
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed_rows_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, (d.status)::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN failed_rows AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND (d.status)::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
failed_rows_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM failed_rows_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM failed_rows_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
failed_rows_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING failed_rows_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
failed_rows_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j
      USING unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NOT NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              COALESCE(f.error, j.last_error) AS last_error),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, CASE WHEN pg_column_size(payload) < 2048 AND pg_column_compression(payload) IS NULL THEN pg_column_size(payload) ELSE octet_length(payload::text) END AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM (
    SELECT id, sum(size) OVER (ORDER BY priority DESC, run_at, id) - size AS before
      FROM picked) AS sized
 WHERE before < %(claim_bytes)s))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM failed_rows_results
                UNION ALL SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       (SELECT count(*) FROM (SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=False kinds=False budget=True limited=True failures=False plain=False limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s
       AND (dependents IS NULL
            OR dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = "pgqueue_jobs".id))
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
done_slots AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM "pgqueue_jobs_limit_slots" AS s, done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
       AND s.slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                WHERE m.limit_key = s.limit_key), 1)
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                        WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                          AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                  WHERE m.limit_key = s.limit_key), 1))
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                        WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL)),
done_handed AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT limit_key, count(*) AS free FROM done_slots GROUP BY limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
                      AND t.id <> ALL(ARRAY(SELECT id FROM limited))
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN done_slots AS f ON f.limit_key = k.limit_key AND f.n = x.n),
done_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET (job_id, attempt, taken_at) = (SELECT h.id, h.attempts + 1, now() FROM done_handed AS h
                                           WHERE h.limit_key = s.limit_key AND h.slot = s.slot)
      FROM done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
done_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'succeeded', v.value, NULL, d.attempts, now() + d.result_ttl
      FROM done AS d
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
done_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING done AS d
     WHERE d.dependents IS NOT NULL AND e.parent_id = d.id
    RETURNING e.parent_id, e.job_id),
done_released AS (
    UPDATE "pgqueue_jobs" AS j
       SET waiting_on = j.waiting_on - r.n,
           status = CASE WHEN j.waiting_on > r.n THEN 'waiting' ELSE 'pending' END,
           run_at = CASE WHEN j.waiting_on > r.n THEN j.run_at ELSE greatest(j.run_at, now()) END,
           parents = coalesce(j.parents, '{}') || r.kept
      FROM (SELECT e.job_id, count(*)::integer AS n,
                   coalesce(jsonb_object_agg(e.parent_id::text, v.value)
                              FILTER (WHERE v.value IS NOT NULL), '{}') AS kept
              FROM done_edges AS e
              LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value)
                     ON v.id = e.parent_id
             GROUP BY e.job_id ORDER BY e.job_id) AS r
     WHERE j.id = r.job_id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT job_id FROM done_edges))
    RETURNING j.id,
              CASE WHEN j.status = 'pending' THEN pg_notify('pgqueue_jobs', j.kind)::text END),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(SELECT id FROM done_handed) || ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, CASE WHEN pg_column_size(payload) < 2048 AND pg_column_compression(payload) IS NULL THEN pg_column_size(payload) ELSE octet_length(payload::text) END AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM (
    SELECT id, sum(size) OVER (ORDER BY priority DESC, run_at, id) - size AS before
      FROM picked) AS sized
 WHERE before < %(claim_bytes)s
 LIMIT greatest(0, 20 - (SELECT count(*) FROM limited) - (SELECT count(*) FROM done_handed))))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM done_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM done_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       (SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1),
       (SELECT count(*) FROM (SELECT slot FROM done_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=False kinds=False budget=True limited=True failures=False plain=True limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, CASE WHEN pg_column_size(payload) < 2048 AND pg_column_compression(payload) IS NULL THEN pg_column_size(payload) ELSE octet_length(payload::text) END AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM (
    SELECT id, sum(size) OVER (ORDER BY priority DESC, run_at, id) - size AS before
      FROM picked) AS sized
 WHERE before < %(claim_bytes)s
 LIMIT 20 - (SELECT count(*) FROM limited)))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       0,
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       (SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1),
       0,
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=False kinds=False budget=True limited=True failures=True plain=False limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens),
failed_rows AS (
    UPDATE "pgqueue_jobs" AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error)
      FROM unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents),
failed_rows_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM failed_rows AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.claimed
    RETURNING s.slot, s.job_id),
failed_rows_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, d.status, NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows AS d
     WHERE d.result_ttl IS NOT NULL
       AND d.status = 'dead'
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed_rows_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, (d.status)::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN failed_rows AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND (d.status)::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
failed_rows_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM failed_rows_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM failed_rows_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
failed_rows_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING failed_rows_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
failed_rows_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j
      USING unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NOT NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              COALESCE(f.error, j.last_error) AS last_error),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s
       AND (dependents IS NULL
            OR dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = "pgqueue_jobs".id))
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
done_slots AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM "pgqueue_jobs_limit_slots" AS s, done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
       AND s.slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                WHERE m.limit_key = s.limit_key), 1)
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                        WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                          AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                  WHERE m.limit_key = s.limit_key), 1))
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                        WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL)),
done_handed AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT limit_key, count(*) AS free FROM done_slots GROUP BY limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
                      AND t.id <> ALL(ARRAY(SELECT id FROM limited))
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN done_slots AS f ON f.limit_key = k.limit_key AND f.n = x.n),
done_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET (job_id, attempt, taken_at) = (SELECT h.id, h.attempts + 1, now() FROM done_handed AS h
                                           WHERE h.limit_key = s.limit_key AND h.slot = s.slot)
      FROM done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
done_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'succeeded', v.value, NULL, d.attempts, now() + d.result_ttl
      FROM done AS d
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
done_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING done AS d
     WHERE d.dependents IS NOT NULL AND e.parent_id = d.id
    RETURNING e.parent_id, e.job_id),
done_released AS (
    UPDATE "pgqueue_jobs" AS j
       SET waiting_on = j.waiting_on - r.n,
           status = CASE WHEN j.waiting_on > r.n THEN 'waiting' ELSE 'pending' END,
           run_at = CASE WHEN j.waiting_on > r.n THEN j.run_at ELSE greatest(j.run_at, now()) END,
           parents = coalesce(j.parents, '{}') || r.kept
      FROM (SELECT e.job_id, count(*)::integer AS n,
                   coalesce(jsonb_object_agg(e.parent_id::text, v.value)
                              FILTER (WHERE v.value IS NOT NULL), '{}') AS kept
              FROM done_edges AS e
              LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value)
                     ON v.id = e.parent_id
             GROUP BY e.job_id ORDER BY e.job_id) AS r
     WHERE j.id = r.job_id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT job_id FROM done_edges))
       AND j.id <> ALL(ARRAY(SELECT id FROM failed_rows_below UNION ALL SELECT id FROM cancelled_below))
    RETURNING j.id,
              CASE WHEN j.status = 'pending' THEN pg_notify('pgqueue_jobs', j.kind)::text END),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(SELECT id FROM done_handed) || ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, CASE WHEN pg_column_size(payload) < 2048 AND pg_column_compression(payload) IS NULL THEN pg_column_size(payload) ELSE octet_length(payload::text) END AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM (
    SELECT id, sum(size) OVER (ORDER BY priority DESC, run_at, id) - size AS before
      FROM picked) AS sized
 WHERE before < %(claim_bytes)s
 LIMIT greatest(0, 20 - (SELECT count(*) FROM limited) - (SELECT count(*) FROM done_handed))))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM done_results
                UNION ALL SELECT job_id FROM failed_rows_results
                UNION ALL SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM done_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       (SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1),
       (SELECT count(*) FROM (SELECT slot FROM done_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=False kinds=False budget=True limited=True failures=True plain=True limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused)
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens),
failed_rows AS (
    UPDATE "pgqueue_jobs" AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error)
      FROM unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents),
failed_rows_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM failed_rows AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.claimed
    RETURNING s.slot, s.job_id),
failed_rows_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, d.status, NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows AS d
     WHERE d.result_ttl IS NOT NULL
       AND d.status = 'dead'
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed_rows_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, (d.status)::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN failed_rows AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND (d.status)::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
failed_rows_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM failed_rows_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM failed_rows_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
failed_rows_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING failed_rows_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
failed_rows_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j
      USING unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NOT NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              COALESCE(f.error, j.last_error) AS last_error),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, CASE WHEN pg_column_size(payload) < 2048 AND pg_column_compression(payload) IS NULL THEN pg_column_size(payload) ELSE octet_length(payload::text) END AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM (
    SELECT id, sum(size) OVER (ORDER BY priority DESC, run_at, id) - size AS before
      FROM picked) AS sized
 WHERE before < %(claim_bytes)s
 LIMIT 20 - (SELECT count(*) FROM limited)))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM failed_rows_results
                UNION ALL SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       (SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1),
       (SELECT count(*) FROM (SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=False kinds=True budget=False limited=False failures=False plain=False limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s
       AND (dependents IS NULL
            OR dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = "pgqueue_jobs".id))
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
done_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
done_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'succeeded', v.value, NULL, d.attempts, now() + d.result_ttl
      FROM done AS d
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
done_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING done AS d
     WHERE d.dependents IS NOT NULL AND e.parent_id = d.id
    RETURNING e.parent_id, e.job_id),
done_released AS (
    UPDATE "pgqueue_jobs" AS j
       SET waiting_on = j.waiting_on - r.n,
           status = CASE WHEN j.waiting_on > r.n THEN 'waiting' ELSE 'pending' END,
           run_at = CASE WHEN j.waiting_on > r.n THEN j.run_at ELSE greatest(j.run_at, now()) END,
           parents = coalesce(j.parents, '{}') || r.kept
      FROM (SELECT e.job_id, count(*)::integer AS n,
                   coalesce(jsonb_object_agg(e.parent_id::text, v.value)
                              FILTER (WHERE v.value IS NOT NULL), '{}') AS kept
              FROM done_edges AS e
              LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value)
                     ON v.id = e.parent_id
             GROUP BY e.job_id ORDER BY e.job_id) AS r
     WHERE j.id = r.job_id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT job_id FROM done_edges))
    RETURNING j.id,
              CASE WHEN j.status = 'pending' THEN pg_notify('pgqueue_jobs', j.kind)::text END),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM done_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM done_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       (SELECT count(*) FROM (SELECT slot FROM done_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=False kinds=True budget=False limited=False failures=False plain=True limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       0,
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       0,
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=False kinds=True budget=False limited=False failures=True plain=False limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed_rows AS (
    UPDATE "pgqueue_jobs" AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error)
      FROM unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents),
failed_rows_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM failed_rows AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.claimed
    RETURNING s.slot, s.job_id),
failed_rows_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, d.status, NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows AS d
     WHERE d.result_ttl IS NOT NULL
       AND d.status = 'dead'
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed_rows_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, (d.status)::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN failed_rows AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND (d.status)::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
failed_rows_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM failed_rows_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM failed_rows_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
failed_rows_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING failed_rows_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
failed_rows_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j
      USING unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NOT NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              COALESCE(f.error, j.last_error) AS last_error),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s
       AND (dependents IS NULL
            OR dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = "pgqueue_jobs".id))
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
done_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
done_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'succeeded', v.value, NULL, d.attempts, now() + d.result_ttl
      FROM done AS d
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
done_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING done AS d
     WHERE d.dependents IS NOT NULL AND e.parent_id = d.id
    RETURNING e.parent_id, e.job_id),
done_released AS (
    UPDATE "pgqueue_jobs" AS j
       SET waiting_on = j.waiting_on - r.n,
           status = CASE WHEN j.waiting_on > r.n THEN 'waiting' ELSE 'pending' END,
           run_at = CASE WHEN j.waiting_on > r.n THEN j.run_at ELSE greatest(j.run_at, now()) END,
           parents = coalesce(j.parents, '{}') || r.kept
      FROM (SELECT e.job_id, count(*)::integer AS n,
                   coalesce(jsonb_object_agg(e.parent_id::text, v.value)
                              FILTER (WHERE v.value IS NOT NULL), '{}') AS kept
              FROM done_edges AS e
              LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value)
                     ON v.id = e.parent_id
             GROUP BY e.job_id ORDER BY e.job_id) AS r
     WHERE j.id = r.job_id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT job_id FROM done_edges))
       AND j.id <> ALL(ARRAY(SELECT id FROM failed_rows_below UNION ALL SELECT id FROM cancelled_below))
    RETURNING j.id,
              CASE WHEN j.status = 'pending' THEN pg_notify('pgqueue_jobs', j.kind)::text END),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM done_results
                UNION ALL SELECT job_id FROM failed_rows_results
                UNION ALL SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM done_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       (SELECT count(*) FROM (SELECT slot FROM done_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=False kinds=True budget=False limited=False failures=True plain=True limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed_rows AS (
    UPDATE "pgqueue_jobs" AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error)
      FROM unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents),
failed_rows_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM failed_rows AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.claimed
    RETURNING s.slot, s.job_id),
failed_rows_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, d.status, NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows AS d
     WHERE d.result_ttl IS NOT NULL
       AND d.status = 'dead'
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed_rows_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, (d.status)::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN failed_rows AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND (d.status)::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
failed_rows_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM failed_rows_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM failed_rows_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
failed_rows_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING failed_rows_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
failed_rows_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j
      USING unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NOT NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              COALESCE(f.error, j.last_error) AS last_error),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM failed_rows_results
                UNION ALL SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       (SELECT count(*) FROM (SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=False kinds=True budget=False limited=True failures=False plain=False limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.kind = ANY(%(kinds)s::text[])
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.kind = ANY(%(kinds)s::text[])
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.kind = ANY(%(kinds)s::text[])
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s
       AND (dependents IS NULL
            OR dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = "pgqueue_jobs".id))
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
done_slots AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM "pgqueue_jobs_limit_slots" AS s, done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
       AND s.slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                WHERE m.limit_key = s.limit_key), 1)
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                        WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                          AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                  WHERE m.limit_key = s.limit_key), 1))
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                        WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL)),
done_handed AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT limit_key, count(*) AS free FROM done_slots GROUP BY limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.kind = ANY(%(kinds)s::text[])
                      AND t.id <> ALL(ARRAY(SELECT id FROM limited))
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN done_slots AS f ON f.limit_key = k.limit_key AND f.n = x.n),
done_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET (job_id, attempt, taken_at) = (SELECT h.id, h.attempts + 1, now() FROM done_handed AS h
                                           WHERE h.limit_key = s.limit_key AND h.slot = s.slot)
      FROM done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
done_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'succeeded', v.value, NULL, d.attempts, now() + d.result_ttl
      FROM done AS d
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
done_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING done AS d
     WHERE d.dependents IS NOT NULL AND e.parent_id = d.id
    RETURNING e.parent_id, e.job_id),
done_released AS (
    UPDATE "pgqueue_jobs" AS j
       SET waiting_on = j.waiting_on - r.n,
           status = CASE WHEN j.waiting_on > r.n THEN 'waiting' ELSE 'pending' END,
           run_at = CASE WHEN j.waiting_on > r.n THEN j.run_at ELSE greatest(j.run_at, now()) END,
           parents = coalesce(j.parents, '{}') || r.kept
      FROM (SELECT e.job_id, count(*)::integer AS n,
                   coalesce(jsonb_object_agg(e.parent_id::text, v.value)
                              FILTER (WHERE v.value IS NOT NULL), '{}') AS kept
              FROM done_edges AS e
              LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value)
                     ON v.id = e.parent_id
             GROUP BY e.job_id ORDER BY e.job_id) AS r
     WHERE j.id = r.job_id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT job_id FROM done_edges))
    RETURNING j.id,
              CASE WHEN j.status = 'pending' THEN pg_notify('pgqueue_jobs', j.kind)::text END),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(SELECT id FROM done_handed) || ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked
 LIMIT greatest(0, 20 - (SELECT count(*) FROM limited) - (SELECT count(*) FROM done_handed))))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM done_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM done_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       (SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1),
       (SELECT count(*) FROM (SELECT slot FROM done_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=False kinds=True budget=False limited=True failures=False plain=True limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.kind = ANY(%(kinds)s::text[])
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.kind = ANY(%(kinds)s::text[])
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.kind = ANY(%(kinds)s::text[])
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked
 LIMIT 20 - (SELECT count(*) FROM limited)))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       0,
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       (SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1),
       0,
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=False kinds=True budget=False limited=True failures=True plain=False limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.kind = ANY(%(kinds)s::text[])
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.kind = ANY(%(kinds)s::text[])
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.kind = ANY(%(kinds)s::text[])
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens),
failed_rows AS (
    UPDATE "pgqueue_jobs" AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error)
      FROM unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents),
failed_rows_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM failed_rows AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.claimed
    RETURNING s.slot, s.job_id),
failed_rows_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, d.status, NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows AS d
     WHERE d.result_ttl IS NOT NULL
       AND d.status = 'dead'
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed_rows_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, (d.status)::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN failed_rows AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND (d.status)::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
failed_rows_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM failed_rows_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM failed_rows_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
failed_rows_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING failed_rows_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
failed_rows_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j
      USING unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NOT NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              COALESCE(f.error, j.last_error) AS last_error),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s
       AND (dependents IS NULL
            OR dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = "pgqueue_jobs".id))
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
done_slots AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM "pgqueue_jobs_limit_slots" AS s, done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
       AND s.slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                WHERE m.limit_key = s.limit_key), 1)
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                        WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                          AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                  WHERE m.limit_key = s.limit_key), 1))
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                        WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL)),
done_handed AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT limit_key, count(*) AS free FROM done_slots GROUP BY limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.kind = ANY(%(kinds)s::text[])
                      AND t.id <> ALL(ARRAY(SELECT id FROM limited))
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN done_slots AS f ON f.limit_key = k.limit_key AND f.n = x.n),
done_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET (job_id, attempt, taken_at) = (SELECT h.id, h.attempts + 1, now() FROM done_handed AS h
                                           WHERE h.limit_key = s.limit_key AND h.slot = s.slot)
      FROM done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
done_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'succeeded', v.value, NULL, d.attempts, now() + d.result_ttl
      FROM done AS d
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
done_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING done AS d
     WHERE d.dependents IS NOT NULL AND e.parent_id = d.id
    RETURNING e.parent_id, e.job_id),
done_released AS (
    UPDATE "pgqueue_jobs" AS j
       SET waiting_on = j.waiting_on - r.n,
           status = CASE WHEN j.waiting_on > r.n THEN 'waiting' ELSE 'pending' END,
           run_at = CASE WHEN j.waiting_on > r.n THEN j.run_at ELSE greatest(j.run_at, now()) END,
           parents = coalesce(j.parents, '{}') || r.kept
      FROM (SELECT e.job_id, count(*)::integer AS n,
                   coalesce(jsonb_object_agg(e.parent_id::text, v.value)
                              FILTER (WHERE v.value IS NOT NULL), '{}') AS kept
              FROM done_edges AS e
              LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value)
                     ON v.id = e.parent_id
             GROUP BY e.job_id ORDER BY e.job_id) AS r
     WHERE j.id = r.job_id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT job_id FROM done_edges))
       AND j.id <> ALL(ARRAY(SELECT id FROM failed_rows_below UNION ALL SELECT id FROM cancelled_below))
    RETURNING j.id,
              CASE WHEN j.status = 'pending' THEN pg_notify('pgqueue_jobs', j.kind)::text END),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(SELECT id FROM done_handed) || ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked
 LIMIT greatest(0, 20 - (SELECT count(*) FROM limited) - (SELECT count(*) FROM done_handed))))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM done_results
                UNION ALL SELECT job_id FROM failed_rows_results
                UNION ALL SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM done_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       (SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1),
       (SELECT count(*) FROM (SELECT slot FROM done_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=False kinds=True budget=False limited=True failures=True plain=True limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.kind = ANY(%(kinds)s::text[])
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.kind = ANY(%(kinds)s::text[])
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.kind = ANY(%(kinds)s::text[])
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens),
failed_rows AS (
    UPDATE "pgqueue_jobs" AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error)
      FROM unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents),
failed_rows_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM failed_rows AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.claimed
    RETURNING s.slot, s.job_id),
failed_rows_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, d.status, NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows AS d
     WHERE d.result_ttl IS NOT NULL
       AND d.status = 'dead'
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed_rows_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, (d.status)::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN failed_rows AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND (d.status)::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
failed_rows_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM failed_rows_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM failed_rows_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
failed_rows_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING failed_rows_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
failed_rows_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j
      USING unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NOT NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              COALESCE(f.error, j.last_error) AS last_error),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked
 LIMIT 20 - (SELECT count(*) FROM limited)))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM failed_rows_results
                UNION ALL SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       (SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1),
       (SELECT count(*) FROM (SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=False kinds=True budget=True limited=False failures=False plain=False limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s
       AND (dependents IS NULL
            OR dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = "pgqueue_jobs".id))
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
done_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
done_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'succeeded', v.value, NULL, d.attempts, now() + d.result_ttl
      FROM done AS d
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
done_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING done AS d
     WHERE d.dependents IS NOT NULL AND e.parent_id = d.id
    RETURNING e.parent_id, e.job_id),
done_released AS (
    UPDATE "pgqueue_jobs" AS j
       SET waiting_on = j.waiting_on - r.n,
           status = CASE WHEN j.waiting_on > r.n THEN 'waiting' ELSE 'pending' END,
           run_at = CASE WHEN j.waiting_on > r.n THEN j.run_at ELSE greatest(j.run_at, now()) END,
           parents = coalesce(j.parents, '{}') || r.kept
      FROM (SELECT e.job_id, count(*)::integer AS n,
                   coalesce(jsonb_object_agg(e.parent_id::text, v.value)
                              FILTER (WHERE v.value IS NOT NULL), '{}') AS kept
              FROM done_edges AS e
              LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value)
                     ON v.id = e.parent_id
             GROUP BY e.job_id ORDER BY e.job_id) AS r
     WHERE j.id = r.job_id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT job_id FROM done_edges))
    RETURNING j.id,
              CASE WHEN j.status = 'pending' THEN pg_notify('pgqueue_jobs', j.kind)::text END),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, CASE WHEN pg_column_size(payload) < 2048 AND pg_column_compression(payload) IS NULL THEN pg_column_size(payload) ELSE octet_length(payload::text) END AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM (
    SELECT id, sum(size) OVER (ORDER BY priority DESC, run_at, id) - size AS before
      FROM picked) AS sized
 WHERE before < %(claim_bytes)s))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM done_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM done_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       (SELECT count(*) FROM (SELECT slot FROM done_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=False kinds=True budget=True limited=False failures=False plain=True limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, CASE WHEN pg_column_size(payload) < 2048 AND pg_column_compression(payload) IS NULL THEN pg_column_size(payload) ELSE octet_length(payload::text) END AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM (
    SELECT id, sum(size) OVER (ORDER BY priority DESC, run_at, id) - size AS before
      FROM picked) AS sized
 WHERE before < %(claim_bytes)s))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       0,
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       0,
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=False kinds=True budget=True limited=False failures=True plain=False limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed_rows AS (
    UPDATE "pgqueue_jobs" AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error)
      FROM unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents),
failed_rows_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM failed_rows AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.claimed
    RETURNING s.slot, s.job_id),
failed_rows_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, d.status, NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows AS d
     WHERE d.result_ttl IS NOT NULL
       AND d.status = 'dead'
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed_rows_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, (d.status)::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN failed_rows AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND (d.status)::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
failed_rows_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM failed_rows_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM failed_rows_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
failed_rows_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING failed_rows_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
failed_rows_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j
      USING unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NOT NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              COALESCE(f.error, j.last_error) AS last_error),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s
       AND (dependents IS NULL
            OR dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = "pgqueue_jobs".id))
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
done_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
done_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'succeeded', v.value, NULL, d.attempts, now() + d.result_ttl
      FROM done AS d
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
done_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING done AS d
     WHERE d.dependents IS NOT NULL AND e.parent_id = d.id
    RETURNING e.parent_id, e.job_id),
done_released AS (
    UPDATE "pgqueue_jobs" AS j
       SET waiting_on = j.waiting_on - r.n,
           status = CASE WHEN j.waiting_on > r.n THEN 'waiting' ELSE 'pending' END,
           run_at = CASE WHEN j.waiting_on > r.n THEN j.run_at ELSE greatest(j.run_at, now()) END,
           parents = coalesce(j.parents, '{}') || r.kept
      FROM (SELECT e.job_id, count(*)::integer AS n,
                   coalesce(jsonb_object_agg(e.parent_id::text, v.value)
                              FILTER (WHERE v.value IS NOT NULL), '{}') AS kept
              FROM done_edges AS e
              LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value)
                     ON v.id = e.parent_id
             GROUP BY e.job_id ORDER BY e.job_id) AS r
     WHERE j.id = r.job_id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT job_id FROM done_edges))
       AND j.id <> ALL(ARRAY(SELECT id FROM failed_rows_below UNION ALL SELECT id FROM cancelled_below))
    RETURNING j.id,
              CASE WHEN j.status = 'pending' THEN pg_notify('pgqueue_jobs', j.kind)::text END),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, CASE WHEN pg_column_size(payload) < 2048 AND pg_column_compression(payload) IS NULL THEN pg_column_size(payload) ELSE octet_length(payload::text) END AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM (
    SELECT id, sum(size) OVER (ORDER BY priority DESC, run_at, id) - size AS before
      FROM picked) AS sized
 WHERE before < %(claim_bytes)s))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM done_results
                UNION ALL SELECT job_id FROM failed_rows_results
                UNION ALL SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM done_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       (SELECT count(*) FROM (SELECT slot FROM done_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=False kinds=True budget=True limited=False failures=True plain=True limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed_rows AS (
    UPDATE "pgqueue_jobs" AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error)
      FROM unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents),
failed_rows_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM failed_rows AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.claimed
    RETURNING s.slot, s.job_id),
failed_rows_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, d.status, NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows AS d
     WHERE d.result_ttl IS NOT NULL
       AND d.status = 'dead'
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed_rows_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, (d.status)::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN failed_rows AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND (d.status)::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
failed_rows_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM failed_rows_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM failed_rows_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
failed_rows_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING failed_rows_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
failed_rows_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j
      USING unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NOT NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              COALESCE(f.error, j.last_error) AS last_error),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, CASE WHEN pg_column_size(payload) < 2048 AND pg_column_compression(payload) IS NULL THEN pg_column_size(payload) ELSE octet_length(payload::text) END AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM (
    SELECT id, sum(size) OVER (ORDER BY priority DESC, run_at, id) - size AS before
      FROM picked) AS sized
 WHERE before < %(claim_bytes)s))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM failed_rows_results
                UNION ALL SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       (SELECT count(*) FROM (SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=False kinds=True budget=True limited=True failures=False plain=False limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.kind = ANY(%(kinds)s::text[])
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.kind = ANY(%(kinds)s::text[])
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.kind = ANY(%(kinds)s::text[])
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s
       AND (dependents IS NULL
            OR dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = "pgqueue_jobs".id))
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
done_slots AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM "pgqueue_jobs_limit_slots" AS s, done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
       AND s.slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                WHERE m.limit_key = s.limit_key), 1)
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                        WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                          AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                  WHERE m.limit_key = s.limit_key), 1))
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                        WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL)),
done_handed AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT limit_key, count(*) AS free FROM done_slots GROUP BY limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.kind = ANY(%(kinds)s::text[])
                      AND t.id <> ALL(ARRAY(SELECT id FROM limited))
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN done_slots AS f ON f.limit_key = k.limit_key AND f.n = x.n),
done_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET (job_id, attempt, taken_at) = (SELECT h.id, h.attempts + 1, now() FROM done_handed AS h
                                           WHERE h.limit_key = s.limit_key AND h.slot = s.slot)
      FROM done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
done_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'succeeded', v.value, NULL, d.attempts, now() + d.result_ttl
      FROM done AS d
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
done_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING done AS d
     WHERE d.dependents IS NOT NULL AND e.parent_id = d.id
    RETURNING e.parent_id, e.job_id),
done_released AS (
    UPDATE "pgqueue_jobs" AS j
       SET waiting_on = j.waiting_on - r.n,
           status = CASE WHEN j.waiting_on > r.n THEN 'waiting' ELSE 'pending' END,
           run_at = CASE WHEN j.waiting_on > r.n THEN j.run_at ELSE greatest(j.run_at, now()) END,
           parents = coalesce(j.parents, '{}') || r.kept
      FROM (SELECT e.job_id, count(*)::integer AS n,
                   coalesce(jsonb_object_agg(e.parent_id::text, v.value)
                              FILTER (WHERE v.value IS NOT NULL), '{}') AS kept
              FROM done_edges AS e
              LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value)
                     ON v.id = e.parent_id
             GROUP BY e.job_id ORDER BY e.job_id) AS r
     WHERE j.id = r.job_id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT job_id FROM done_edges))
    RETURNING j.id,
              CASE WHEN j.status = 'pending' THEN pg_notify('pgqueue_jobs', j.kind)::text END),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(SELECT id FROM done_handed) || ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, CASE WHEN pg_column_size(payload) < 2048 AND pg_column_compression(payload) IS NULL THEN pg_column_size(payload) ELSE octet_length(payload::text) END AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM (
    SELECT id, sum(size) OVER (ORDER BY priority DESC, run_at, id) - size AS before
      FROM picked) AS sized
 WHERE before < %(claim_bytes)s
 LIMIT greatest(0, 20 - (SELECT count(*) FROM limited) - (SELECT count(*) FROM done_handed))))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM done_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM done_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       (SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1),
       (SELECT count(*) FROM (SELECT slot FROM done_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=False kinds=True budget=True limited=True failures=False plain=True limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.kind = ANY(%(kinds)s::text[])
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.kind = ANY(%(kinds)s::text[])
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.kind = ANY(%(kinds)s::text[])
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, CASE WHEN pg_column_size(payload) < 2048 AND pg_column_compression(payload) IS NULL THEN pg_column_size(payload) ELSE octet_length(payload::text) END AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM (
    SELECT id, sum(size) OVER (ORDER BY priority DESC, run_at, id) - size AS before
      FROM picked) AS sized
 WHERE before < %(claim_bytes)s
 LIMIT 20 - (SELECT count(*) FROM limited)))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       0,
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       (SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1),
       0,
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=False kinds=True budget=True limited=True failures=True plain=False limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.kind = ANY(%(kinds)s::text[])
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.kind = ANY(%(kinds)s::text[])
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.kind = ANY(%(kinds)s::text[])
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens),
failed_rows AS (
    UPDATE "pgqueue_jobs" AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error)
      FROM unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents),
failed_rows_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM failed_rows AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.claimed
    RETURNING s.slot, s.job_id),
failed_rows_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, d.status, NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows AS d
     WHERE d.result_ttl IS NOT NULL
       AND d.status = 'dead'
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed_rows_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, (d.status)::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN failed_rows AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND (d.status)::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
failed_rows_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM failed_rows_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM failed_rows_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
failed_rows_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING failed_rows_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
failed_rows_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j
      USING unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NOT NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              COALESCE(f.error, j.last_error) AS last_error),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s
       AND (dependents IS NULL
            OR dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = "pgqueue_jobs".id))
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
done_slots AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM "pgqueue_jobs_limit_slots" AS s, done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
       AND s.slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                WHERE m.limit_key = s.limit_key), 1)
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                        WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                          AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                  WHERE m.limit_key = s.limit_key), 1))
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                        WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL)),
done_handed AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT limit_key, count(*) AS free FROM done_slots GROUP BY limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.kind = ANY(%(kinds)s::text[])
                      AND t.id <> ALL(ARRAY(SELECT id FROM limited))
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN done_slots AS f ON f.limit_key = k.limit_key AND f.n = x.n),
done_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET (job_id, attempt, taken_at) = (SELECT h.id, h.attempts + 1, now() FROM done_handed AS h
                                           WHERE h.limit_key = s.limit_key AND h.slot = s.slot)
      FROM done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
done_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'succeeded', v.value, NULL, d.attempts, now() + d.result_ttl
      FROM done AS d
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
done_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING done AS d
     WHERE d.dependents IS NOT NULL AND e.parent_id = d.id
    RETURNING e.parent_id, e.job_id),
done_released AS (
    UPDATE "pgqueue_jobs" AS j
       SET waiting_on = j.waiting_on - r.n,
           status = CASE WHEN j.waiting_on > r.n THEN 'waiting' ELSE 'pending' END,
           run_at = CASE WHEN j.waiting_on > r.n THEN j.run_at ELSE greatest(j.run_at, now()) END,
           parents = coalesce(j.parents, '{}') || r.kept
      FROM (SELECT e.job_id, count(*)::integer AS n,
                   coalesce(jsonb_object_agg(e.parent_id::text, v.value)
                              FILTER (WHERE v.value IS NOT NULL), '{}') AS kept
              FROM done_edges AS e
              LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value)
                     ON v.id = e.parent_id
             GROUP BY e.job_id ORDER BY e.job_id) AS r
     WHERE j.id = r.job_id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT job_id FROM done_edges))
       AND j.id <> ALL(ARRAY(SELECT id FROM failed_rows_below UNION ALL SELECT id FROM cancelled_below))
    RETURNING j.id,
              CASE WHEN j.status = 'pending' THEN pg_notify('pgqueue_jobs', j.kind)::text END),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(SELECT id FROM done_handed) || ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, CASE WHEN pg_column_size(payload) < 2048 AND pg_column_compression(payload) IS NULL THEN pg_column_size(payload) ELSE octet_length(payload::text) END AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM (
    SELECT id, sum(size) OVER (ORDER BY priority DESC, run_at, id) - size AS before
      FROM picked) AS sized
 WHERE before < %(claim_bytes)s
 LIMIT greatest(0, 20 - (SELECT count(*) FROM limited) - (SELECT count(*) FROM done_handed))))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM done_results
                UNION ALL SELECT job_id FROM failed_rows_results
                UNION ALL SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM done_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       (SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1),
       (SELECT count(*) FROM (SELECT slot FROM done_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=False kinds=True budget=True limited=True failures=True plain=True limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.kind = ANY(%(kinds)s::text[])
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.kind = ANY(%(kinds)s::text[])
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.kind = ANY(%(kinds)s::text[])
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens),
failed_rows AS (
    UPDATE "pgqueue_jobs" AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error)
      FROM unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents),
failed_rows_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM failed_rows AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.claimed
    RETURNING s.slot, s.job_id),
failed_rows_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, d.status, NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows AS d
     WHERE d.result_ttl IS NOT NULL
       AND d.status = 'dead'
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed_rows_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, (d.status)::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN failed_rows AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND (d.status)::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
failed_rows_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM failed_rows_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM failed_rows_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
failed_rows_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING failed_rows_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
failed_rows_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j
      USING unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NOT NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              COALESCE(f.error, j.last_error) AS last_error),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(
WITH RECURSIVE
found(queue) AS (
    SELECT min(queue) FROM "pgqueue_jobs" WHERE status = 'pending' AND limit_key IS NULL
  UNION ALL
    SELECT (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue > f.queue)
      FROM found AS f WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, CASE WHEN pg_column_size(payload) < 2048 AND pg_column_compression(payload) IS NULL THEN pg_column_size(payload) ELSE octet_length(payload::text) END AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM (
    SELECT id, sum(size) OVER (ORDER BY priority DESC, run_at, id) - size AS before
      FROM picked) AS sized
 WHERE before < %(claim_bytes)s
 LIMIT 20 - (SELECT count(*) FROM limited)))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM failed_rows_results
                UNION ALL SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       (SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1),
       (SELECT count(*) FROM (SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=True kinds=False budget=False limited=False failures=False plain=False limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s
       AND (dependents IS NULL
            OR dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = "pgqueue_jobs".id))
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
done_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
done_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'succeeded', v.value, NULL, d.attempts, now() + d.result_ttl
      FROM done AS d
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
done_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING done AS d
     WHERE d.dependents IS NOT NULL AND e.parent_id = d.id
    RETURNING e.parent_id, e.job_id),
done_released AS (
    UPDATE "pgqueue_jobs" AS j
       SET waiting_on = j.waiting_on - r.n,
           status = CASE WHEN j.waiting_on > r.n THEN 'waiting' ELSE 'pending' END,
           run_at = CASE WHEN j.waiting_on > r.n THEN j.run_at ELSE greatest(j.run_at, now()) END,
           parents = coalesce(j.parents, '{}') || r.kept
      FROM (SELECT e.job_id, count(*)::integer AS n,
                   coalesce(jsonb_object_agg(e.parent_id::text, v.value)
                              FILTER (WHERE v.value IS NOT NULL), '{}') AS kept
              FROM done_edges AS e
              LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value)
                     ON v.id = e.parent_id
             GROUP BY e.job_id ORDER BY e.job_id) AS r
     WHERE j.id = r.job_id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT job_id FROM done_edges))
    RETURNING j.id,
              CASE WHEN j.status = 'pending' THEN pg_notify('pgqueue_jobs', j.kind)::text END),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM done_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM done_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       (SELECT count(*) FROM (SELECT slot FROM done_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=True kinds=False budget=False limited=False failures=False plain=True limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       0,
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       0,
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=True kinds=False budget=False limited=False failures=True plain=False limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed_rows AS (
    UPDATE "pgqueue_jobs" AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error)
      FROM unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents),
failed_rows_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM failed_rows AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.claimed
    RETURNING s.slot, s.job_id),
failed_rows_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, d.status, NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows AS d
     WHERE d.result_ttl IS NOT NULL
       AND d.status = 'dead'
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed_rows_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, (d.status)::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN failed_rows AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND (d.status)::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
failed_rows_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM failed_rows_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM failed_rows_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
failed_rows_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING failed_rows_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
failed_rows_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j
      USING unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NOT NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              COALESCE(f.error, j.last_error) AS last_error),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s
       AND (dependents IS NULL
            OR dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = "pgqueue_jobs".id))
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
done_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
done_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'succeeded', v.value, NULL, d.attempts, now() + d.result_ttl
      FROM done AS d
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
done_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING done AS d
     WHERE d.dependents IS NOT NULL AND e.parent_id = d.id
    RETURNING e.parent_id, e.job_id),
done_released AS (
    UPDATE "pgqueue_jobs" AS j
       SET waiting_on = j.waiting_on - r.n,
           status = CASE WHEN j.waiting_on > r.n THEN 'waiting' ELSE 'pending' END,
           run_at = CASE WHEN j.waiting_on > r.n THEN j.run_at ELSE greatest(j.run_at, now()) END,
           parents = coalesce(j.parents, '{}') || r.kept
      FROM (SELECT e.job_id, count(*)::integer AS n,
                   coalesce(jsonb_object_agg(e.parent_id::text, v.value)
                              FILTER (WHERE v.value IS NOT NULL), '{}') AS kept
              FROM done_edges AS e
              LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value)
                     ON v.id = e.parent_id
             GROUP BY e.job_id ORDER BY e.job_id) AS r
     WHERE j.id = r.job_id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT job_id FROM done_edges))
       AND j.id <> ALL(ARRAY(SELECT id FROM failed_rows_below UNION ALL SELECT id FROM cancelled_below))
    RETURNING j.id,
              CASE WHEN j.status = 'pending' THEN pg_notify('pgqueue_jobs', j.kind)::text END),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM done_results
                UNION ALL SELECT job_id FROM failed_rows_results
                UNION ALL SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM done_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       (SELECT count(*) FROM (SELECT slot FROM done_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=True kinds=False budget=False limited=False failures=True plain=True limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed_rows AS (
    UPDATE "pgqueue_jobs" AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error)
      FROM unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents),
failed_rows_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM failed_rows AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.claimed
    RETURNING s.slot, s.job_id),
failed_rows_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, d.status, NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows AS d
     WHERE d.result_ttl IS NOT NULL
       AND d.status = 'dead'
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed_rows_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, (d.status)::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN failed_rows AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND (d.status)::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
failed_rows_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM failed_rows_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM failed_rows_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
failed_rows_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING failed_rows_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
failed_rows_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j
      USING unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NOT NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              COALESCE(f.error, j.last_error) AS last_error),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM failed_rows_results
                UNION ALL SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       (SELECT count(*) FROM (SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=True kinds=False budget=False limited=True failures=False plain=False limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[])
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[])
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[])
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s
       AND (dependents IS NULL
            OR dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = "pgqueue_jobs".id))
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
done_slots AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM "pgqueue_jobs_limit_slots" AS s, done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
       AND s.slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                WHERE m.limit_key = s.limit_key), 1)
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                        WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                          AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                  WHERE m.limit_key = s.limit_key), 1))
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                        WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL)),
done_handed AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT limit_key, count(*) AS free FROM done_slots GROUP BY limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[])
                      AND t.id <> ALL(ARRAY(SELECT id FROM limited))
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN done_slots AS f ON f.limit_key = k.limit_key AND f.n = x.n),
done_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET (job_id, attempt, taken_at) = (SELECT h.id, h.attempts + 1, now() FROM done_handed AS h
                                           WHERE h.limit_key = s.limit_key AND h.slot = s.slot)
      FROM done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
done_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'succeeded', v.value, NULL, d.attempts, now() + d.result_ttl
      FROM done AS d
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
done_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING done AS d
     WHERE d.dependents IS NOT NULL AND e.parent_id = d.id
    RETURNING e.parent_id, e.job_id),
done_released AS (
    UPDATE "pgqueue_jobs" AS j
       SET waiting_on = j.waiting_on - r.n,
           status = CASE WHEN j.waiting_on > r.n THEN 'waiting' ELSE 'pending' END,
           run_at = CASE WHEN j.waiting_on > r.n THEN j.run_at ELSE greatest(j.run_at, now()) END,
           parents = coalesce(j.parents, '{}') || r.kept
      FROM (SELECT e.job_id, count(*)::integer AS n,
                   coalesce(jsonb_object_agg(e.parent_id::text, v.value)
                              FILTER (WHERE v.value IS NOT NULL), '{}') AS kept
              FROM done_edges AS e
              LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value)
                     ON v.id = e.parent_id
             GROUP BY e.job_id ORDER BY e.job_id) AS r
     WHERE j.id = r.job_id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT job_id FROM done_edges))
    RETURNING j.id,
              CASE WHEN j.status = 'pending' THEN pg_notify('pgqueue_jobs', j.kind)::text END),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(SELECT id FROM done_handed) || ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked
 LIMIT greatest(0, 20 - (SELECT count(*) FROM limited) - (SELECT count(*) FROM done_handed))))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM done_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM done_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       (SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1),
       (SELECT count(*) FROM (SELECT slot FROM done_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=True kinds=False budget=False limited=True failures=False plain=True limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[])
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[])
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[])
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked
 LIMIT 20 - (SELECT count(*) FROM limited)))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       0,
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       (SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1),
       0,
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=True kinds=False budget=False limited=True failures=True plain=False limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[])
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[])
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[])
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens),
failed_rows AS (
    UPDATE "pgqueue_jobs" AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error)
      FROM unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents),
failed_rows_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM failed_rows AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.claimed
    RETURNING s.slot, s.job_id),
failed_rows_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, d.status, NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows AS d
     WHERE d.result_ttl IS NOT NULL
       AND d.status = 'dead'
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed_rows_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, (d.status)::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN failed_rows AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND (d.status)::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
failed_rows_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM failed_rows_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM failed_rows_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
failed_rows_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING failed_rows_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
failed_rows_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j
      USING unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NOT NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              COALESCE(f.error, j.last_error) AS last_error),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s
       AND (dependents IS NULL
            OR dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = "pgqueue_jobs".id))
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
done_slots AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM "pgqueue_jobs_limit_slots" AS s, done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
       AND s.slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                WHERE m.limit_key = s.limit_key), 1)
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                        WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                          AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                  WHERE m.limit_key = s.limit_key), 1))
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                        WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL)),
done_handed AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT limit_key, count(*) AS free FROM done_slots GROUP BY limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[])
                      AND t.id <> ALL(ARRAY(SELECT id FROM limited))
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN done_slots AS f ON f.limit_key = k.limit_key AND f.n = x.n),
done_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET (job_id, attempt, taken_at) = (SELECT h.id, h.attempts + 1, now() FROM done_handed AS h
                                           WHERE h.limit_key = s.limit_key AND h.slot = s.slot)
      FROM done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
done_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'succeeded', v.value, NULL, d.attempts, now() + d.result_ttl
      FROM done AS d
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
done_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING done AS d
     WHERE d.dependents IS NOT NULL AND e.parent_id = d.id
    RETURNING e.parent_id, e.job_id),
done_released AS (
    UPDATE "pgqueue_jobs" AS j
       SET waiting_on = j.waiting_on - r.n,
           status = CASE WHEN j.waiting_on > r.n THEN 'waiting' ELSE 'pending' END,
           run_at = CASE WHEN j.waiting_on > r.n THEN j.run_at ELSE greatest(j.run_at, now()) END,
           parents = coalesce(j.parents, '{}') || r.kept
      FROM (SELECT e.job_id, count(*)::integer AS n,
                   coalesce(jsonb_object_agg(e.parent_id::text, v.value)
                              FILTER (WHERE v.value IS NOT NULL), '{}') AS kept
              FROM done_edges AS e
              LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value)
                     ON v.id = e.parent_id
             GROUP BY e.job_id ORDER BY e.job_id) AS r
     WHERE j.id = r.job_id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT job_id FROM done_edges))
       AND j.id <> ALL(ARRAY(SELECT id FROM failed_rows_below UNION ALL SELECT id FROM cancelled_below))
    RETURNING j.id,
              CASE WHEN j.status = 'pending' THEN pg_notify('pgqueue_jobs', j.kind)::text END),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(SELECT id FROM done_handed) || ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked
 LIMIT greatest(0, 20 - (SELECT count(*) FROM limited) - (SELECT count(*) FROM done_handed))))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM done_results
                UNION ALL SELECT job_id FROM failed_rows_results
                UNION ALL SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM done_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       (SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1),
       (SELECT count(*) FROM (SELECT slot FROM done_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=True kinds=False budget=False limited=True failures=True plain=True limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[])
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[])
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[])
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens),
failed_rows AS (
    UPDATE "pgqueue_jobs" AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error)
      FROM unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents),
failed_rows_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM failed_rows AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.claimed
    RETURNING s.slot, s.job_id),
failed_rows_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, d.status, NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows AS d
     WHERE d.result_ttl IS NOT NULL
       AND d.status = 'dead'
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed_rows_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, (d.status)::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN failed_rows AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND (d.status)::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
failed_rows_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM failed_rows_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM failed_rows_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
failed_rows_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING failed_rows_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
failed_rows_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j
      USING unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NOT NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              COALESCE(f.error, j.last_error) AS last_error),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked
 LIMIT 20 - (SELECT count(*) FROM limited)))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM failed_rows_results
                UNION ALL SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       (SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1),
       (SELECT count(*) FROM (SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=True kinds=False budget=True limited=False failures=False plain=False limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s
       AND (dependents IS NULL
            OR dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = "pgqueue_jobs".id))
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
done_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
done_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'succeeded', v.value, NULL, d.attempts, now() + d.result_ttl
      FROM done AS d
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
done_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING done AS d
     WHERE d.dependents IS NOT NULL AND e.parent_id = d.id
    RETURNING e.parent_id, e.job_id),
done_released AS (
    UPDATE "pgqueue_jobs" AS j
       SET waiting_on = j.waiting_on - r.n,
           status = CASE WHEN j.waiting_on > r.n THEN 'waiting' ELSE 'pending' END,
           run_at = CASE WHEN j.waiting_on > r.n THEN j.run_at ELSE greatest(j.run_at, now()) END,
           parents = coalesce(j.parents, '{}') || r.kept
      FROM (SELECT e.job_id, count(*)::integer AS n,
                   coalesce(jsonb_object_agg(e.parent_id::text, v.value)
                              FILTER (WHERE v.value IS NOT NULL), '{}') AS kept
              FROM done_edges AS e
              LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value)
                     ON v.id = e.parent_id
             GROUP BY e.job_id ORDER BY e.job_id) AS r
     WHERE j.id = r.job_id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT job_id FROM done_edges))
    RETURNING j.id,
              CASE WHEN j.status = 'pending' THEN pg_notify('pgqueue_jobs', j.kind)::text END),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, CASE WHEN pg_column_size(payload) < 2048 AND pg_column_compression(payload) IS NULL THEN pg_column_size(payload) ELSE octet_length(payload::text) END AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM (
    SELECT id, sum(size) OVER (ORDER BY priority DESC, run_at, id) - size AS before
      FROM picked) AS sized
 WHERE before < %(claim_bytes)s))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM done_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM done_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       (SELECT count(*) FROM (SELECT slot FROM done_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=True kinds=False budget=True limited=False failures=False plain=True limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, CASE WHEN pg_column_size(payload) < 2048 AND pg_column_compression(payload) IS NULL THEN pg_column_size(payload) ELSE octet_length(payload::text) END AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM (
    SELECT id, sum(size) OVER (ORDER BY priority DESC, run_at, id) - size AS before
      FROM picked) AS sized
 WHERE before < %(claim_bytes)s))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       0,
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       0,
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=True kinds=False budget=True limited=False failures=True plain=False limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed_rows AS (
    UPDATE "pgqueue_jobs" AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error)
      FROM unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents),
failed_rows_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM failed_rows AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.claimed
    RETURNING s.slot, s.job_id),
failed_rows_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, d.status, NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows AS d
     WHERE d.result_ttl IS NOT NULL
       AND d.status = 'dead'
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed_rows_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, (d.status)::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN failed_rows AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND (d.status)::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
failed_rows_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM failed_rows_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM failed_rows_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
failed_rows_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING failed_rows_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
failed_rows_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j
      USING unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NOT NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              COALESCE(f.error, j.last_error) AS last_error),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s
       AND (dependents IS NULL
            OR dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = "pgqueue_jobs".id))
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
done_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
done_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'succeeded', v.value, NULL, d.attempts, now() + d.result_ttl
      FROM done AS d
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
done_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING done AS d
     WHERE d.dependents IS NOT NULL AND e.parent_id = d.id
    RETURNING e.parent_id, e.job_id),
done_released AS (
    UPDATE "pgqueue_jobs" AS j
       SET waiting_on = j.waiting_on - r.n,
           status = CASE WHEN j.waiting_on > r.n THEN 'waiting' ELSE 'pending' END,
           run_at = CASE WHEN j.waiting_on > r.n THEN j.run_at ELSE greatest(j.run_at, now()) END,
           parents = coalesce(j.parents, '{}') || r.kept
      FROM (SELECT e.job_id, count(*)::integer AS n,
                   coalesce(jsonb_object_agg(e.parent_id::text, v.value)
                              FILTER (WHERE v.value IS NOT NULL), '{}') AS kept
              FROM done_edges AS e
              LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value)
                     ON v.id = e.parent_id
             GROUP BY e.job_id ORDER BY e.job_id) AS r
     WHERE j.id = r.job_id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT job_id FROM done_edges))
       AND j.id <> ALL(ARRAY(SELECT id FROM failed_rows_below UNION ALL SELECT id FROM cancelled_below))
    RETURNING j.id,
              CASE WHEN j.status = 'pending' THEN pg_notify('pgqueue_jobs', j.kind)::text END),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, CASE WHEN pg_column_size(payload) < 2048 AND pg_column_compression(payload) IS NULL THEN pg_column_size(payload) ELSE octet_length(payload::text) END AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM (
    SELECT id, sum(size) OVER (ORDER BY priority DESC, run_at, id) - size AS before
      FROM picked) AS sized
 WHERE before < %(claim_bytes)s))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM done_results
                UNION ALL SELECT job_id FROM failed_rows_results
                UNION ALL SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM done_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       (SELECT count(*) FROM (SELECT slot FROM done_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=True kinds=False budget=True limited=False failures=True plain=True limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed_rows AS (
    UPDATE "pgqueue_jobs" AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error)
      FROM unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents),
failed_rows_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM failed_rows AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.claimed
    RETURNING s.slot, s.job_id),
failed_rows_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, d.status, NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows AS d
     WHERE d.result_ttl IS NOT NULL
       AND d.status = 'dead'
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed_rows_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, (d.status)::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN failed_rows AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND (d.status)::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
failed_rows_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM failed_rows_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM failed_rows_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
failed_rows_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING failed_rows_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
failed_rows_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j
      USING unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NOT NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              COALESCE(f.error, j.last_error) AS last_error),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, CASE WHEN pg_column_size(payload) < 2048 AND pg_column_compression(payload) IS NULL THEN pg_column_size(payload) ELSE octet_length(payload::text) END AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM (
    SELECT id, sum(size) OVER (ORDER BY priority DESC, run_at, id) - size AS before
      FROM picked) AS sized
 WHERE before < %(claim_bytes)s))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM failed_rows_results
                UNION ALL SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       (SELECT count(*) FROM (SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=True kinds=False budget=True limited=True failures=False plain=False limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[])
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[])
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[])
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s
       AND (dependents IS NULL
            OR dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = "pgqueue_jobs".id))
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
done_slots AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM "pgqueue_jobs_limit_slots" AS s, done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
       AND s.slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                WHERE m.limit_key = s.limit_key), 1)
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                        WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                          AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                  WHERE m.limit_key = s.limit_key), 1))
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                        WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL)),
done_handed AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT limit_key, count(*) AS free FROM done_slots GROUP BY limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[])
                      AND t.id <> ALL(ARRAY(SELECT id FROM limited))
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN done_slots AS f ON f.limit_key = k.limit_key AND f.n = x.n),
done_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET (job_id, attempt, taken_at) = (SELECT h.id, h.attempts + 1, now() FROM done_handed AS h
                                           WHERE h.limit_key = s.limit_key AND h.slot = s.slot)
      FROM done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
done_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'succeeded', v.value, NULL, d.attempts, now() + d.result_ttl
      FROM done AS d
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
done_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING done AS d
     WHERE d.dependents IS NOT NULL AND e.parent_id = d.id
    RETURNING e.parent_id, e.job_id),
done_released AS (
    UPDATE "pgqueue_jobs" AS j
       SET waiting_on = j.waiting_on - r.n,
           status = CASE WHEN j.waiting_on > r.n THEN 'waiting' ELSE 'pending' END,
           run_at = CASE WHEN j.waiting_on > r.n THEN j.run_at ELSE greatest(j.run_at, now()) END,
           parents = coalesce(j.parents, '{}') || r.kept
      FROM (SELECT e.job_id, count(*)::integer AS n,
                   coalesce(jsonb_object_agg(e.parent_id::text, v.value)
                              FILTER (WHERE v.value IS NOT NULL), '{}') AS kept
              FROM done_edges AS e
              LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value)
                     ON v.id = e.parent_id
             GROUP BY e.job_id ORDER BY e.job_id) AS r
     WHERE j.id = r.job_id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT job_id FROM done_edges))
    RETURNING j.id,
              CASE WHEN j.status = 'pending' THEN pg_notify('pgqueue_jobs', j.kind)::text END),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(SELECT id FROM done_handed) || ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, CASE WHEN pg_column_size(payload) < 2048 AND pg_column_compression(payload) IS NULL THEN pg_column_size(payload) ELSE octet_length(payload::text) END AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM (
    SELECT id, sum(size) OVER (ORDER BY priority DESC, run_at, id) - size AS before
      FROM picked) AS sized
 WHERE before < %(claim_bytes)s
 LIMIT greatest(0, 20 - (SELECT count(*) FROM limited) - (SELECT count(*) FROM done_handed))))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM done_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM done_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       (SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1),
       (SELECT count(*) FROM (SELECT slot FROM done_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=True kinds=False budget=True limited=True failures=False plain=True limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[])
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[])
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[])
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, CASE WHEN pg_column_size(payload) < 2048 AND pg_column_compression(payload) IS NULL THEN pg_column_size(payload) ELSE octet_length(payload::text) END AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM (
    SELECT id, sum(size) OVER (ORDER BY priority DESC, run_at, id) - size AS before
      FROM picked) AS sized
 WHERE before < %(claim_bytes)s
 LIMIT 20 - (SELECT count(*) FROM limited)))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       0,
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       (SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1),
       0,
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=True kinds=False budget=True limited=True failures=True plain=False limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[])
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[])
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[])
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens),
failed_rows AS (
    UPDATE "pgqueue_jobs" AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error)
      FROM unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents),
failed_rows_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM failed_rows AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.claimed
    RETURNING s.slot, s.job_id),
failed_rows_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, d.status, NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows AS d
     WHERE d.result_ttl IS NOT NULL
       AND d.status = 'dead'
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed_rows_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, (d.status)::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN failed_rows AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND (d.status)::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
failed_rows_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM failed_rows_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM failed_rows_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
failed_rows_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING failed_rows_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
failed_rows_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j
      USING unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NOT NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              COALESCE(f.error, j.last_error) AS last_error),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s
       AND (dependents IS NULL
            OR dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = "pgqueue_jobs".id))
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
done_slots AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM "pgqueue_jobs_limit_slots" AS s, done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
       AND s.slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                WHERE m.limit_key = s.limit_key), 1)
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                        WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                          AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                  WHERE m.limit_key = s.limit_key), 1))
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                        WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL)),
done_handed AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT limit_key, count(*) AS free FROM done_slots GROUP BY limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[])
                      AND t.id <> ALL(ARRAY(SELECT id FROM limited))
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN done_slots AS f ON f.limit_key = k.limit_key AND f.n = x.n),
done_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET (job_id, attempt, taken_at) = (SELECT h.id, h.attempts + 1, now() FROM done_handed AS h
                                           WHERE h.limit_key = s.limit_key AND h.slot = s.slot)
      FROM done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
done_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'succeeded', v.value, NULL, d.attempts, now() + d.result_ttl
      FROM done AS d
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
done_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING done AS d
     WHERE d.dependents IS NOT NULL AND e.parent_id = d.id
    RETURNING e.parent_id, e.job_id),
done_released AS (
    UPDATE "pgqueue_jobs" AS j
       SET waiting_on = j.waiting_on - r.n,
           status = CASE WHEN j.waiting_on > r.n THEN 'waiting' ELSE 'pending' END,
           run_at = CASE WHEN j.waiting_on > r.n THEN j.run_at ELSE greatest(j.run_at, now()) END,
           parents = coalesce(j.parents, '{}') || r.kept
      FROM (SELECT e.job_id, count(*)::integer AS n,
                   coalesce(jsonb_object_agg(e.parent_id::text, v.value)
                              FILTER (WHERE v.value IS NOT NULL), '{}') AS kept
              FROM done_edges AS e
              LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value)
                     ON v.id = e.parent_id
             GROUP BY e.job_id ORDER BY e.job_id) AS r
     WHERE j.id = r.job_id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT job_id FROM done_edges))
       AND j.id <> ALL(ARRAY(SELECT id FROM failed_rows_below UNION ALL SELECT id FROM cancelled_below))
    RETURNING j.id,
              CASE WHEN j.status = 'pending' THEN pg_notify('pgqueue_jobs', j.kind)::text END),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(SELECT id FROM done_handed) || ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, CASE WHEN pg_column_size(payload) < 2048 AND pg_column_compression(payload) IS NULL THEN pg_column_size(payload) ELSE octet_length(payload::text) END AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM (
    SELECT id, sum(size) OVER (ORDER BY priority DESC, run_at, id) - size AS before
      FROM picked) AS sized
 WHERE before < %(claim_bytes)s
 LIMIT greatest(0, 20 - (SELECT count(*) FROM limited) - (SELECT count(*) FROM done_handed))))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM done_results
                UNION ALL SELECT job_id FROM failed_rows_results
                UNION ALL SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM done_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       (SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1),
       (SELECT count(*) FROM (SELECT slot FROM done_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=True kinds=False budget=True limited=True failures=True plain=True limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[])
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[])
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[])
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens),
failed_rows AS (
    UPDATE "pgqueue_jobs" AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error)
      FROM unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents),
failed_rows_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM failed_rows AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.claimed
    RETURNING s.slot, s.job_id),
failed_rows_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, d.status, NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows AS d
     WHERE d.result_ttl IS NOT NULL
       AND d.status = 'dead'
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed_rows_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, (d.status)::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN failed_rows AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND (d.status)::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
failed_rows_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM failed_rows_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM failed_rows_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
failed_rows_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING failed_rows_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
failed_rows_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j
      USING unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NOT NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              COALESCE(f.error, j.last_error) AS last_error),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
            CROSS JOIN LATERAL (
                  SELECT run_at, id, CASE WHEN pg_column_size(payload) < 2048 AND pg_column_compression(payload) IS NULL THEN pg_column_size(payload) ELSE octet_length(payload::text) END AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now()
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM (
    SELECT id, sum(size) OVER (ORDER BY priority DESC, run_at, id) - size AS before
      FROM picked) AS sized
 WHERE before < %(claim_bytes)s
 LIMIT 20 - (SELECT count(*) FROM limited)))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM failed_rows_results
                UNION ALL SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       (SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1),
       (SELECT count(*) FROM (SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=True kinds=True budget=False limited=False failures=False plain=False limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s
       AND (dependents IS NULL
            OR dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = "pgqueue_jobs".id))
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
done_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
done_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'succeeded', v.value, NULL, d.attempts, now() + d.result_ttl
      FROM done AS d
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
done_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING done AS d
     WHERE d.dependents IS NOT NULL AND e.parent_id = d.id
    RETURNING e.parent_id, e.job_id),
done_released AS (
    UPDATE "pgqueue_jobs" AS j
       SET waiting_on = j.waiting_on - r.n,
           status = CASE WHEN j.waiting_on > r.n THEN 'waiting' ELSE 'pending' END,
           run_at = CASE WHEN j.waiting_on > r.n THEN j.run_at ELSE greatest(j.run_at, now()) END,
           parents = coalesce(j.parents, '{}') || r.kept
      FROM (SELECT e.job_id, count(*)::integer AS n,
                   coalesce(jsonb_object_agg(e.parent_id::text, v.value)
                              FILTER (WHERE v.value IS NOT NULL), '{}') AS kept
              FROM done_edges AS e
              LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value)
                     ON v.id = e.parent_id
             GROUP BY e.job_id ORDER BY e.job_id) AS r
     WHERE j.id = r.job_id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT job_id FROM done_edges))
    RETURNING j.id,
              CASE WHEN j.status = 'pending' THEN pg_notify('pgqueue_jobs', j.kind)::text END),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM done_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM done_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       (SELECT count(*) FROM (SELECT slot FROM done_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=True kinds=True budget=False limited=False failures=False plain=True limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       0,
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       0,
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=True kinds=True budget=False limited=False failures=True plain=False limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed_rows AS (
    UPDATE "pgqueue_jobs" AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error)
      FROM unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents),
failed_rows_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM failed_rows AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.claimed
    RETURNING s.slot, s.job_id),
failed_rows_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, d.status, NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows AS d
     WHERE d.result_ttl IS NOT NULL
       AND d.status = 'dead'
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed_rows_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, (d.status)::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN failed_rows AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND (d.status)::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
failed_rows_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM failed_rows_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM failed_rows_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
failed_rows_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING failed_rows_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
failed_rows_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j
      USING unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NOT NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              COALESCE(f.error, j.last_error) AS last_error),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s
       AND (dependents IS NULL
            OR dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = "pgqueue_jobs".id))
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
done_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
done_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'succeeded', v.value, NULL, d.attempts, now() + d.result_ttl
      FROM done AS d
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
done_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING done AS d
     WHERE d.dependents IS NOT NULL AND e.parent_id = d.id
    RETURNING e.parent_id, e.job_id),
done_released AS (
    UPDATE "pgqueue_jobs" AS j
       SET waiting_on = j.waiting_on - r.n,
           status = CASE WHEN j.waiting_on > r.n THEN 'waiting' ELSE 'pending' END,
           run_at = CASE WHEN j.waiting_on > r.n THEN j.run_at ELSE greatest(j.run_at, now()) END,
           parents = coalesce(j.parents, '{}') || r.kept
      FROM (SELECT e.job_id, count(*)::integer AS n,
                   coalesce(jsonb_object_agg(e.parent_id::text, v.value)
                              FILTER (WHERE v.value IS NOT NULL), '{}') AS kept
              FROM done_edges AS e
              LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value)
                     ON v.id = e.parent_id
             GROUP BY e.job_id ORDER BY e.job_id) AS r
     WHERE j.id = r.job_id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT job_id FROM done_edges))
       AND j.id <> ALL(ARRAY(SELECT id FROM failed_rows_below UNION ALL SELECT id FROM cancelled_below))
    RETURNING j.id,
              CASE WHEN j.status = 'pending' THEN pg_notify('pgqueue_jobs', j.kind)::text END),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM done_results
                UNION ALL SELECT job_id FROM failed_rows_results
                UNION ALL SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM done_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       (SELECT count(*) FROM (SELECT slot FROM done_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=True kinds=True budget=False limited=False failures=True plain=True limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed_rows AS (
    UPDATE "pgqueue_jobs" AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error)
      FROM unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents),
failed_rows_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM failed_rows AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.claimed
    RETURNING s.slot, s.job_id),
failed_rows_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, d.status, NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows AS d
     WHERE d.result_ttl IS NOT NULL
       AND d.status = 'dead'
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed_rows_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, (d.status)::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN failed_rows AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND (d.status)::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
failed_rows_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM failed_rows_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM failed_rows_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
failed_rows_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING failed_rows_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
failed_rows_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j
      USING unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NOT NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              COALESCE(f.error, j.last_error) AS last_error),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM failed_rows_results
                UNION ALL SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       (SELECT count(*) FROM (SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=True kinds=True budget=False limited=True failures=False plain=False limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s
       AND (dependents IS NULL
            OR dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = "pgqueue_jobs".id))
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
done_slots AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM "pgqueue_jobs_limit_slots" AS s, done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
       AND s.slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                WHERE m.limit_key = s.limit_key), 1)
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                        WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                          AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                  WHERE m.limit_key = s.limit_key), 1))
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                        WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL)),
done_handed AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT limit_key, count(*) AS free FROM done_slots GROUP BY limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
                      AND t.id <> ALL(ARRAY(SELECT id FROM limited))
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN done_slots AS f ON f.limit_key = k.limit_key AND f.n = x.n),
done_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET (job_id, attempt, taken_at) = (SELECT h.id, h.attempts + 1, now() FROM done_handed AS h
                                           WHERE h.limit_key = s.limit_key AND h.slot = s.slot)
      FROM done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
done_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'succeeded', v.value, NULL, d.attempts, now() + d.result_ttl
      FROM done AS d
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
done_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING done AS d
     WHERE d.dependents IS NOT NULL AND e.parent_id = d.id
    RETURNING e.parent_id, e.job_id),
done_released AS (
    UPDATE "pgqueue_jobs" AS j
       SET waiting_on = j.waiting_on - r.n,
           status = CASE WHEN j.waiting_on > r.n THEN 'waiting' ELSE 'pending' END,
           run_at = CASE WHEN j.waiting_on > r.n THEN j.run_at ELSE greatest(j.run_at, now()) END,
           parents = coalesce(j.parents, '{}') || r.kept
      FROM (SELECT e.job_id, count(*)::integer AS n,
                   coalesce(jsonb_object_agg(e.parent_id::text, v.value)
                              FILTER (WHERE v.value IS NOT NULL), '{}') AS kept
              FROM done_edges AS e
              LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value)
                     ON v.id = e.parent_id
             GROUP BY e.job_id ORDER BY e.job_id) AS r
     WHERE j.id = r.job_id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT job_id FROM done_edges))
    RETURNING j.id,
              CASE WHEN j.status = 'pending' THEN pg_notify('pgqueue_jobs', j.kind)::text END),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(SELECT id FROM done_handed) || ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked
 LIMIT greatest(0, 20 - (SELECT count(*) FROM limited) - (SELECT count(*) FROM done_handed))))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM done_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM done_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       (SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1),
       (SELECT count(*) FROM (SELECT slot FROM done_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=True kinds=True budget=False limited=True failures=False plain=True limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked
 LIMIT 20 - (SELECT count(*) FROM limited)))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       0,
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       (SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1),
       0,
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=True kinds=True budget=False limited=True failures=True plain=False limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens),
failed_rows AS (
    UPDATE "pgqueue_jobs" AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error)
      FROM unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents),
failed_rows_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM failed_rows AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.claimed
    RETURNING s.slot, s.job_id),
failed_rows_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, d.status, NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows AS d
     WHERE d.result_ttl IS NOT NULL
       AND d.status = 'dead'
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed_rows_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, (d.status)::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN failed_rows AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND (d.status)::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
failed_rows_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM failed_rows_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM failed_rows_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
failed_rows_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING failed_rows_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
failed_rows_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j
      USING unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NOT NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              COALESCE(f.error, j.last_error) AS last_error),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s
       AND (dependents IS NULL
            OR dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = "pgqueue_jobs".id))
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
done_slots AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM "pgqueue_jobs_limit_slots" AS s, done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
       AND s.slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                WHERE m.limit_key = s.limit_key), 1)
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                        WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                          AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                  WHERE m.limit_key = s.limit_key), 1))
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                        WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL)),
done_handed AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT limit_key, count(*) AS free FROM done_slots GROUP BY limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
                      AND t.id <> ALL(ARRAY(SELECT id FROM limited))
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN done_slots AS f ON f.limit_key = k.limit_key AND f.n = x.n),
done_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET (job_id, attempt, taken_at) = (SELECT h.id, h.attempts + 1, now() FROM done_handed AS h
                                           WHERE h.limit_key = s.limit_key AND h.slot = s.slot)
      FROM done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
done_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'succeeded', v.value, NULL, d.attempts, now() + d.result_ttl
      FROM done AS d
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
done_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING done AS d
     WHERE d.dependents IS NOT NULL AND e.parent_id = d.id
    RETURNING e.parent_id, e.job_id),
done_released AS (
    UPDATE "pgqueue_jobs" AS j
       SET waiting_on = j.waiting_on - r.n,
           status = CASE WHEN j.waiting_on > r.n THEN 'waiting' ELSE 'pending' END,
           run_at = CASE WHEN j.waiting_on > r.n THEN j.run_at ELSE greatest(j.run_at, now()) END,
           parents = coalesce(j.parents, '{}') || r.kept
      FROM (SELECT e.job_id, count(*)::integer AS n,
                   coalesce(jsonb_object_agg(e.parent_id::text, v.value)
                              FILTER (WHERE v.value IS NOT NULL), '{}') AS kept
              FROM done_edges AS e
              LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value)
                     ON v.id = e.parent_id
             GROUP BY e.job_id ORDER BY e.job_id) AS r
     WHERE j.id = r.job_id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT job_id FROM done_edges))
       AND j.id <> ALL(ARRAY(SELECT id FROM failed_rows_below UNION ALL SELECT id FROM cancelled_below))
    RETURNING j.id,
              CASE WHEN j.status = 'pending' THEN pg_notify('pgqueue_jobs', j.kind)::text END),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(SELECT id FROM done_handed) || ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked
 LIMIT greatest(0, 20 - (SELECT count(*) FROM limited) - (SELECT count(*) FROM done_handed))))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM done_results
                UNION ALL SELECT job_id FROM failed_rows_results
                UNION ALL SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM done_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       (SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1),
       (SELECT count(*) FROM (SELECT slot FROM done_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=True kinds=True budget=False limited=True failures=True plain=True limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens),
failed_rows AS (
    UPDATE "pgqueue_jobs" AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error)
      FROM unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents),
failed_rows_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM failed_rows AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.claimed
    RETURNING s.slot, s.job_id),
failed_rows_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, d.status, NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows AS d
     WHERE d.result_ttl IS NOT NULL
       AND d.status = 'dead'
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed_rows_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, (d.status)::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN failed_rows AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND (d.status)::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
failed_rows_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM failed_rows_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM failed_rows_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
failed_rows_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING failed_rows_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
failed_rows_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j
      USING unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NOT NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              COALESCE(f.error, j.last_error) AS last_error),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked
 LIMIT 20 - (SELECT count(*) FROM limited)))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM failed_rows_results
                UNION ALL SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       (SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1),
       (SELECT count(*) FROM (SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=True kinds=True budget=True limited=False failures=False plain=False limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s
       AND (dependents IS NULL
            OR dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = "pgqueue_jobs".id))
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
done_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
done_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'succeeded', v.value, NULL, d.attempts, now() + d.result_ttl
      FROM done AS d
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
done_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING done AS d
     WHERE d.dependents IS NOT NULL AND e.parent_id = d.id
    RETURNING e.parent_id, e.job_id),
done_released AS (
    UPDATE "pgqueue_jobs" AS j
       SET waiting_on = j.waiting_on - r.n,
           status = CASE WHEN j.waiting_on > r.n THEN 'waiting' ELSE 'pending' END,
           run_at = CASE WHEN j.waiting_on > r.n THEN j.run_at ELSE greatest(j.run_at, now()) END,
           parents = coalesce(j.parents, '{}') || r.kept
      FROM (SELECT e.job_id, count(*)::integer AS n,
                   coalesce(jsonb_object_agg(e.parent_id::text, v.value)
                              FILTER (WHERE v.value IS NOT NULL), '{}') AS kept
              FROM done_edges AS e
              LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value)
                     ON v.id = e.parent_id
             GROUP BY e.job_id ORDER BY e.job_id) AS r
     WHERE j.id = r.job_id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT job_id FROM done_edges))
    RETURNING j.id,
              CASE WHEN j.status = 'pending' THEN pg_notify('pgqueue_jobs', j.kind)::text END),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, CASE WHEN pg_column_size(payload) < 2048 AND pg_column_compression(payload) IS NULL THEN pg_column_size(payload) ELSE octet_length(payload::text) END AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM (
    SELECT id, sum(size) OVER (ORDER BY priority DESC, run_at, id) - size AS before
      FROM picked) AS sized
 WHERE before < %(claim_bytes)s))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM done_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM done_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       (SELECT count(*) FROM (SELECT slot FROM done_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=True kinds=True budget=True limited=False failures=False plain=True limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, CASE WHEN pg_column_size(payload) < 2048 AND pg_column_compression(payload) IS NULL THEN pg_column_size(payload) ELSE octet_length(payload::text) END AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM (
    SELECT id, sum(size) OVER (ORDER BY priority DESC, run_at, id) - size AS before
      FROM picked) AS sized
 WHERE before < %(claim_bytes)s))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       0,
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       0,
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=True kinds=True budget=True limited=False failures=True plain=False limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed_rows AS (
    UPDATE "pgqueue_jobs" AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error)
      FROM unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents),
failed_rows_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM failed_rows AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.claimed
    RETURNING s.slot, s.job_id),
failed_rows_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, d.status, NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows AS d
     WHERE d.result_ttl IS NOT NULL
       AND d.status = 'dead'
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed_rows_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, (d.status)::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN failed_rows AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND (d.status)::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
failed_rows_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM failed_rows_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM failed_rows_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
failed_rows_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING failed_rows_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
failed_rows_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j
      USING unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NOT NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              COALESCE(f.error, j.last_error) AS last_error),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s
       AND (dependents IS NULL
            OR dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = "pgqueue_jobs".id))
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
done_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
done_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'succeeded', v.value, NULL, d.attempts, now() + d.result_ttl
      FROM done AS d
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
done_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING done AS d
     WHERE d.dependents IS NOT NULL AND e.parent_id = d.id
    RETURNING e.parent_id, e.job_id),
done_released AS (
    UPDATE "pgqueue_jobs" AS j
       SET waiting_on = j.waiting_on - r.n,
           status = CASE WHEN j.waiting_on > r.n THEN 'waiting' ELSE 'pending' END,
           run_at = CASE WHEN j.waiting_on > r.n THEN j.run_at ELSE greatest(j.run_at, now()) END,
           parents = coalesce(j.parents, '{}') || r.kept
      FROM (SELECT e.job_id, count(*)::integer AS n,
                   coalesce(jsonb_object_agg(e.parent_id::text, v.value)
                              FILTER (WHERE v.value IS NOT NULL), '{}') AS kept
              FROM done_edges AS e
              LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value)
                     ON v.id = e.parent_id
             GROUP BY e.job_id ORDER BY e.job_id) AS r
     WHERE j.id = r.job_id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT job_id FROM done_edges))
       AND j.id <> ALL(ARRAY(SELECT id FROM failed_rows_below UNION ALL SELECT id FROM cancelled_below))
    RETURNING j.id,
              CASE WHEN j.status = 'pending' THEN pg_notify('pgqueue_jobs', j.kind)::text END),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, CASE WHEN pg_column_size(payload) < 2048 AND pg_column_compression(payload) IS NULL THEN pg_column_size(payload) ELSE octet_length(payload::text) END AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM (
    SELECT id, sum(size) OVER (ORDER BY priority DESC, run_at, id) - size AS before
      FROM picked) AS sized
 WHERE before < %(claim_bytes)s))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM done_results
                UNION ALL SELECT job_id FROM failed_rows_results
                UNION ALL SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM done_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       (SELECT count(*) FROM (SELECT slot FROM done_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=True kinds=True budget=True limited=False failures=True plain=True limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed_rows AS (
    UPDATE "pgqueue_jobs" AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error)
      FROM unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents),
failed_rows_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM failed_rows AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.claimed
    RETURNING s.slot, s.job_id),
failed_rows_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, d.status, NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows AS d
     WHERE d.result_ttl IS NOT NULL
       AND d.status = 'dead'
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed_rows_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, (d.status)::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN failed_rows AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND (d.status)::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
failed_rows_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM failed_rows_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM failed_rows_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
failed_rows_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING failed_rows_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
failed_rows_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j
      USING unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NOT NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              COALESCE(f.error, j.last_error) AS last_error),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, CASE WHEN pg_column_size(payload) < 2048 AND pg_column_compression(payload) IS NULL THEN pg_column_size(payload) ELSE octet_length(payload::text) END AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM (
    SELECT id, sum(size) OVER (ORDER BY priority DESC, run_at, id) - size AS before
      FROM picked) AS sized
 WHERE before < %(claim_bytes)s))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM failed_rows_results
                UNION ALL SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       (SELECT count(*) FROM (SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=True kinds=True budget=True limited=True failures=False plain=False limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s
       AND (dependents IS NULL
            OR dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = "pgqueue_jobs".id))
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
done_slots AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM "pgqueue_jobs_limit_slots" AS s, done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
       AND s.slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                WHERE m.limit_key = s.limit_key), 1)
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                        WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                          AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                  WHERE m.limit_key = s.limit_key), 1))
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                        WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL)),
done_handed AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT limit_key, count(*) AS free FROM done_slots GROUP BY limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
                      AND t.id <> ALL(ARRAY(SELECT id FROM limited))
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN done_slots AS f ON f.limit_key = k.limit_key AND f.n = x.n),
done_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET (job_id, attempt, taken_at) = (SELECT h.id, h.attempts + 1, now() FROM done_handed AS h
                                           WHERE h.limit_key = s.limit_key AND h.slot = s.slot)
      FROM done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
done_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'succeeded', v.value, NULL, d.attempts, now() + d.result_ttl
      FROM done AS d
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
done_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING done AS d
     WHERE d.dependents IS NOT NULL AND e.parent_id = d.id
    RETURNING e.parent_id, e.job_id),
done_released AS (
    UPDATE "pgqueue_jobs" AS j
       SET waiting_on = j.waiting_on - r.n,
           status = CASE WHEN j.waiting_on > r.n THEN 'waiting' ELSE 'pending' END,
           run_at = CASE WHEN j.waiting_on > r.n THEN j.run_at ELSE greatest(j.run_at, now()) END,
           parents = coalesce(j.parents, '{}') || r.kept
      FROM (SELECT e.job_id, count(*)::integer AS n,
                   coalesce(jsonb_object_agg(e.parent_id::text, v.value)
                              FILTER (WHERE v.value IS NOT NULL), '{}') AS kept
              FROM done_edges AS e
              LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value)
                     ON v.id = e.parent_id
             GROUP BY e.job_id ORDER BY e.job_id) AS r
     WHERE j.id = r.job_id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT job_id FROM done_edges))
    RETURNING j.id,
              CASE WHEN j.status = 'pending' THEN pg_notify('pgqueue_jobs', j.kind)::text END),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(SELECT id FROM done_handed) || ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, CASE WHEN pg_column_size(payload) < 2048 AND pg_column_compression(payload) IS NULL THEN pg_column_size(payload) ELSE octet_length(payload::text) END AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM (
    SELECT id, sum(size) OVER (ORDER BY priority DESC, run_at, id) - size AS before
      FROM picked) AS sized
 WHERE before < %(claim_bytes)s
 LIMIT greatest(0, 20 - (SELECT count(*) FROM limited) - (SELECT count(*) FROM done_handed))))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM done_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM done_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       (SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1),
       (SELECT count(*) FROM (SELECT slot FROM done_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=True kinds=True budget=True limited=True failures=False plain=True limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, CASE WHEN pg_column_size(payload) < 2048 AND pg_column_compression(payload) IS NULL THEN pg_column_size(payload) ELSE octet_length(payload::text) END AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM (
    SELECT id, sum(size) OVER (ORDER BY priority DESC, run_at, id) - size AS before
      FROM picked) AS sized
 WHERE before < %(claim_bytes)s
 LIMIT 20 - (SELECT count(*) FROM limited)))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       0,
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       (SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1),
       0,
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=True kinds=True budget=True limited=True failures=True plain=False limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens),
failed_rows AS (
    UPDATE "pgqueue_jobs" AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error)
      FROM unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents),
failed_rows_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM failed_rows AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.claimed
    RETURNING s.slot, s.job_id),
failed_rows_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, d.status, NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows AS d
     WHERE d.result_ttl IS NOT NULL
       AND d.status = 'dead'
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed_rows_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, (d.status)::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN failed_rows AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND (d.status)::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
failed_rows_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM failed_rows_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM failed_rows_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
failed_rows_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING failed_rows_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
failed_rows_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j
      USING unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NOT NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              COALESCE(f.error, j.last_error) AS last_error),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s
       AND (dependents IS NULL
            OR dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = "pgqueue_jobs".id))
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
done_slots AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM "pgqueue_jobs_limit_slots" AS s, done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
       AND s.slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                WHERE m.limit_key = s.limit_key), 1)
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                        WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                          AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                  WHERE m.limit_key = s.limit_key), 1))
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                        WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL)),
done_handed AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT limit_key, count(*) AS free FROM done_slots GROUP BY limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
                      AND t.id <> ALL(ARRAY(SELECT id FROM limited))
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN done_slots AS f ON f.limit_key = k.limit_key AND f.n = x.n),
done_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET (job_id, attempt, taken_at) = (SELECT h.id, h.attempts + 1, now() FROM done_handed AS h
                                           WHERE h.limit_key = s.limit_key AND h.slot = s.slot)
      FROM done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
done_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'succeeded', v.value, NULL, d.attempts, now() + d.result_ttl
      FROM done AS d
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
done_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING done AS d
     WHERE d.dependents IS NOT NULL AND e.parent_id = d.id
    RETURNING e.parent_id, e.job_id),
done_released AS (
    UPDATE "pgqueue_jobs" AS j
       SET waiting_on = j.waiting_on - r.n,
           status = CASE WHEN j.waiting_on > r.n THEN 'waiting' ELSE 'pending' END,
           run_at = CASE WHEN j.waiting_on > r.n THEN j.run_at ELSE greatest(j.run_at, now()) END,
           parents = coalesce(j.parents, '{}') || r.kept
      FROM (SELECT e.job_id, count(*)::integer AS n,
                   coalesce(jsonb_object_agg(e.parent_id::text, v.value)
                              FILTER (WHERE v.value IS NOT NULL), '{}') AS kept
              FROM done_edges AS e
              LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value)
                     ON v.id = e.parent_id
             GROUP BY e.job_id ORDER BY e.job_id) AS r
     WHERE j.id = r.job_id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT job_id FROM done_edges))
       AND j.id <> ALL(ARRAY(SELECT id FROM failed_rows_below UNION ALL SELECT id FROM cancelled_below))
    RETURNING j.id,
              CASE WHEN j.status = 'pending' THEN pg_notify('pgqueue_jobs', j.kind)::text END),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(SELECT id FROM done_handed) || ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, CASE WHEN pg_column_size(payload) < 2048 AND pg_column_compression(payload) IS NULL THEN pg_column_size(payload) ELSE octet_length(payload::text) END AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM (
    SELECT id, sum(size) OVER (ORDER BY priority DESC, run_at, id) - size AS before
      FROM picked) AS sized
 WHERE before < %(claim_bytes)s
 LIMIT greatest(0, 20 - (SELECT count(*) FROM limited) - (SELECT count(*) FROM done_handed))))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM done_results
                UNION ALL SELECT job_id FROM failed_rows_results
                UNION ALL SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM done_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       (SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1),
       (SELECT count(*) FROM (SELECT slot FROM done_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=True kinds=True budget=True limited=True failures=True plain=False limited_max=5)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 5
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens),
failed_rows AS (
    UPDATE "pgqueue_jobs" AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error)
      FROM unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents),
failed_rows_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM failed_rows AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.claimed
    RETURNING s.slot, s.job_id),
failed_rows_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, d.status, NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows AS d
     WHERE d.result_ttl IS NOT NULL
       AND d.status = 'dead'
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed_rows_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, (d.status)::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN failed_rows AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND (d.status)::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
failed_rows_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM failed_rows_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM failed_rows_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
failed_rows_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING failed_rows_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
failed_rows_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j
      USING unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NOT NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              COALESCE(f.error, j.last_error) AS last_error),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s
       AND (dependents IS NULL
            OR dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = "pgqueue_jobs".id))
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
done_slots AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM "pgqueue_jobs_limit_slots" AS s, done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
       AND s.slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                WHERE m.limit_key = s.limit_key), 1)
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                        WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                          AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                  WHERE m.limit_key = s.limit_key), 1))
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                        WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL)),
done_handed AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT limit_key, count(*) AS free FROM done_slots GROUP BY limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
                      AND t.id <> ALL(ARRAY(SELECT id FROM limited))
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN done_slots AS f ON f.limit_key = k.limit_key AND f.n = x.n),
done_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET (job_id, attempt, taken_at) = (SELECT h.id, h.attempts + 1, now() FROM done_handed AS h
                                           WHERE h.limit_key = s.limit_key AND h.slot = s.slot)
      FROM done AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
done_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'succeeded', v.value, NULL, d.attempts, now() + d.result_ttl
      FROM done AS d
      LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value) ON v.id = d.id
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
done_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING done AS d
     WHERE d.dependents IS NOT NULL AND e.parent_id = d.id
    RETURNING e.parent_id, e.job_id),
done_released AS (
    UPDATE "pgqueue_jobs" AS j
       SET waiting_on = j.waiting_on - r.n,
           status = CASE WHEN j.waiting_on > r.n THEN 'waiting' ELSE 'pending' END,
           run_at = CASE WHEN j.waiting_on > r.n THEN j.run_at ELSE greatest(j.run_at, now()) END,
           parents = coalesce(j.parents, '{}') || r.kept
      FROM (SELECT e.job_id, count(*)::integer AS n,
                   coalesce(jsonb_object_agg(e.parent_id::text, v.value)
                              FILTER (WHERE v.value IS NOT NULL), '{}') AS kept
              FROM done_edges AS e
              LEFT JOIN unnest(%(r_id)s::bigint[], %(r_value)s::jsonb[]) AS v(id, value)
                     ON v.id = e.parent_id
             GROUP BY e.job_id ORDER BY e.job_id) AS r
     WHERE j.id = r.job_id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT job_id FROM done_edges))
       AND j.id <> ALL(ARRAY(SELECT id FROM failed_rows_below UNION ALL SELECT id FROM cancelled_below))
    RETURNING j.id,
              CASE WHEN j.status = 'pending' THEN pg_notify('pgqueue_jobs', j.kind)::text END),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(SELECT id FROM done_handed) || ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, CASE WHEN pg_column_size(payload) < 2048 AND pg_column_compression(payload) IS NULL THEN pg_column_size(payload) ELSE octet_length(payload::text) END AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM (
    SELECT id, sum(size) OVER (ORDER BY priority DESC, run_at, id) - size AS before
      FROM picked) AS sized
 WHERE before < %(claim_bytes)s
 LIMIT greatest(0, 20 - (SELECT count(*) FROM limited) - (SELECT count(*) FROM done_handed))))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM done_results
                UNION ALL SELECT job_id FROM failed_rows_results
                UNION ALL SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM done_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       (SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1),
       (SELECT count(*) FROM (SELECT slot FROM done_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=True kinds=True budget=True limited=True failures=True plain=True limited_max=None)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 20
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens),
failed_rows AS (
    UPDATE "pgqueue_jobs" AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error)
      FROM unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents),
failed_rows_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM failed_rows AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.claimed
    RETURNING s.slot, s.job_id),
failed_rows_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, d.status, NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows AS d
     WHERE d.result_ttl IS NOT NULL
       AND d.status = 'dead'
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed_rows_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, (d.status)::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN failed_rows AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND (d.status)::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
failed_rows_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM failed_rows_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM failed_rows_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
failed_rows_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING failed_rows_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
failed_rows_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j
      USING unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NOT NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              COALESCE(f.error, j.last_error) AS last_error),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, CASE WHEN pg_column_size(payload) < 2048 AND pg_column_compression(payload) IS NULL THEN pg_column_size(payload) ELSE octet_length(payload::text) END AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM (
    SELECT id, sum(size) OVER (ORDER BY priority DESC, run_at, id) - size AS before
      FROM picked) AS sized
 WHERE before < %(claim_bytes)s
 LIMIT 20 - (SELECT count(*) FROM limited)))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM failed_rows_results
                UNION ALL SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       (SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1),
       (SELECT count(*) FROM (SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=True kinds=True budget=True limited=True failures=True plain=True limited_max=5)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
bucket AS (
    SELECT m.limit_key, m.per_second,
           least(m.burst, m.tokens + m.per_second
                 * extract(epoch FROM now() - m.refilled_at)::double precision) AS tokens
      FROM "pgqueue_jobs_limits" AS m
     WHERE m.per_second IS NOT NULL
       -- A probe of the key's first ready job, per key (a scalar subquery:
       -- as EXISTS, the planner could read every ready limited job first).
       AND (SELECT true FROM "pgqueue_jobs" AS t
             WHERE t.status = 'pending' AND t.limit_key = m.limit_key
               AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
             LIMIT 1)
       FOR UPDATE SKIP LOCKED),
free AS (
    SELECT s.limit_key, s.slot,
           row_number() OVER (PARTITION BY s.limit_key ORDER BY s.slot) AS n
      FROM (SELECT limit_key, slot FROM "pgqueue_jobs_limit_slots" AS s
             WHERE job_id IS NULL
               -- Within the limit, and none taken above it (a lowered
               -- limit): slots above it are never taken again, only freed,
               -- so one seen taken from an older snapshot errs on the safe
               -- side. Every slot taken is then within the limit.
               AND slot <= coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                      WHERE m.limit_key = s.limit_key), 1)
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limit_slots" AS h
                                WHERE h.limit_key = s.limit_key AND h.job_id IS NOT NULL
                                  AND h.slot > coalesce((SELECT max_running FROM "pgqueue_jobs_limits" AS m
                                                          WHERE m.limit_key = s.limit_key), 1))
               AND (SELECT true FROM "pgqueue_jobs" AS t
                     WHERE t.status = 'pending' AND t.limit_key = s.limit_key
                       AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
                     LIMIT 1)
               -- A key with a rate: only with a token, in a bucket this claim holds.
               AND NOT EXISTS (SELECT FROM "pgqueue_jobs_limits" AS r
                                WHERE r.limit_key = s.limit_key AND r.per_second IS NOT NULL
                                  AND NOT EXISTS (SELECT FROM bucket AS b
                                                   WHERE b.limit_key = r.limit_key
                                                     AND b.tokens >= 1))
             ORDER BY limit_key, slot
             LIMIT 5
             FOR UPDATE SKIP LOCKED) AS s),
limited AS (
    SELECT x.id, x.attempts, f.limit_key, f.slot
      FROM (SELECT f.limit_key, least(count(*), min(floor(b.tokens))::bigint) AS free
              FROM free AS f LEFT JOIN bucket AS b ON b.limit_key = f.limit_key
             GROUP BY f.limit_key) AS k
     CROSS JOIN LATERAL (
           SELECT y.id, y.attempts, row_number() OVER () AS n
             FROM (SELECT id, attempts FROM "pgqueue_jobs" AS t
                    WHERE t.status = 'pending' AND t.limit_key = k.limit_key
                      AND t.run_at <= now()
                              AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q
                                               WHERE q.queue = t.queue AND q.paused) AND t.queue = ANY(%(queues)s::text[]) AND t.kind = ANY(%(kinds)s::text[])
                    ORDER BY t.priority DESC, t.run_at, t.id
                    LIMIT k.free
                    FOR UPDATE SKIP LOCKED) AS y) AS x
      JOIN free AS f ON f.limit_key = k.limit_key AND f.n = x.n),
taken AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s
       SET job_id = l.id, attempt = l.attempts + 1, taken_at = now()
      FROM limited AS l
     WHERE s.limit_key = l.limit_key AND s.slot = l.slot),
spent AS (
    UPDATE "pgqueue_jobs_limits" AS m
       SET tokens = b.tokens - (SELECT count(*) FROM limited AS l
                                 WHERE l.limit_key = b.limit_key),
           refilled_at = now()
      FROM bucket AS b
     WHERE m.limit_key = b.limit_key
    RETURNING b.per_second, m.tokens),
failed_rows AS (
    UPDATE "pgqueue_jobs" AS j
       SET status = CASE WHEN f.status <> 'cancelled' THEN f.status
                         WHEN j.attempts < j.max_attempts THEN 'pending' ELSE 'dead' END,
           -- Pending: when to try again. Dead: when it died, for purge_dead.
           run_at = CASE WHEN f.status = 'pending' THEN now() + f.delay ELSE now() END,
           -- A "queued" unique job that started once keeps attempts > 0, so
           -- that it never re-enters its unique index beside a newer duplicate.
           attempts = CASE WHEN j.unique_scope = 'queued' THEN greatest(f.new_attempts, 1)
                           ELSE f.new_attempts END,
           locked_at = NULL,
           locked_by = NULL,
           last_error = COALESCE(f.error, j.last_error)
      FROM unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING j.id, j.status, f.attempts AS claimed, j.kind, j.queue, j.limit_key, j.result_ttl,
              j.attempts, j.last_error, j.dependents),
failed_rows_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM failed_rows AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.claimed
    RETURNING s.slot, s.job_id),
failed_rows_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, d.status, NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows AS d
     WHERE d.result_ttl IS NOT NULL
       AND d.status = 'dead'
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed_rows_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, (d.status)::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN failed_rows AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND (d.status)::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
failed_rows_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM failed_rows_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM failed_rows_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
failed_rows_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING failed_rows_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
failed_rows_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM failed_rows_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled AS (
    DELETE FROM "pgqueue_jobs" AS j
      USING unnest(%(f_id)s::bigint[], %(f_attempts)s::integer[], %(f_locked_by)s::text[],
                  %(f_new_attempts)s::integer[], %(f_status)s::text[], %(f_delay)s::interval[],
                  %(f_error)s::text[])
           AS f(id, attempts, locked_by, new_attempts, status, delay, error)
     WHERE j.id = f.id AND j.status = 'running'
       AND j.attempts = f.attempts AND j.locked_by IS NOT DISTINCT FROM f.locked_by
       AND j.cancel_requested_at IS NOT NULL
       AND (j.dependents IS NULL
            OR j.dependents = (SELECT s.dependents FROM "pgqueue_jobs" AS s WHERE s.id = j.id))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              COALESCE(f.error, j.last_error) AS last_error),
cancelled_freed AS (
    UPDATE "pgqueue_jobs_limit_slots" AS s SET job_id = NULL, attempt = NULL, taken_at = NULL
      FROM cancelled AS d
     WHERE d.limit_key IS NOT NULL AND s.limit_key = d.limit_key AND s.job_id = d.id
       AND s.attempt = d.attempts
    RETURNING s.slot, s.job_id),
cancelled_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
cancelled_below AS (
    WITH RECURSIVE below(id, parent, root, ended) AS (
        SELECT e.job_id, e.parent_id, d.id, ('cancelled')::text
          FROM "pgqueue_jobs_dependencies" AS e JOIN cancelled AS d ON e.parent_id = d.id
         WHERE d.dependents IS NOT NULL AND ('cancelled')::text IN ('dead', 'cancelled')
      UNION
        SELECT e.job_id, e.parent_id, b.root, b.ended
          FROM "pgqueue_jobs_dependencies" AS e JOIN below AS b ON e.parent_id = b.id)
    SELECT id, parent, root, ended FROM below),
cancelled_swept AS (
    DELETE FROM "pgqueue_jobs" AS j
     USING (SELECT DISTINCT ON (id) id, root, ended FROM cancelled_below ORDER BY id, root) AS b
     WHERE j.id = b.id AND j.status = 'waiting'
       AND j.id = ANY(ARRAY(SELECT id FROM cancelled_below))
    RETURNING "j"."id", "j"."attempts", "j"."kind", "j"."queue", "j"."limit_key", "j"."result_ttl", "j"."dependents",
              format('cancelled: job %%s, which it waits for, ended %%s', b.root, b.ended)
                  AS last_error,
              CASE WHEN j.result_ttl IS NOT NULL
                   THEN pg_notify('pgqueue_jobs:results', j.id::text)::text END AS told),
cancelled_swept_edges AS (
    DELETE FROM "pgqueue_jobs_dependencies" AS e USING cancelled_below AS b
     WHERE e.parent_id = b.parent AND e.job_id = b.id),
cancelled_swept_results AS (
    INSERT INTO "pgqueue_jobs_results" AS r
           (job_id, kind, queue, outcome, value, error, attempts, expires_at)
    SELECT d.id, d.kind, d.queue, 'cancelled', NULL, d.last_error, d.attempts, now() + d.result_ttl
      FROM cancelled_swept AS d
     WHERE d.result_ttl IS NOT NULL
    ON CONFLICT (job_id) DO UPDATE
       SET outcome = EXCLUDED.outcome, value = EXCLUDED.value, error = EXCLUDED.error,
           attempts = EXCLUDED.attempts, finished_at = now(), expires_at = EXCLUDED.expires_at
    RETURNING r.job_id),
failed AS (
    SELECT id, status FROM failed_rows UNION ALL SELECT id, 'cancelled' FROM cancelled),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(SELECT id FROM limited) || ARRAY(
WITH RECURSIVE
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT s.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL AND queue = s.queue)
      FROM served AS s
  UNION ALL
    SELECT l.queue,
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority)
      FROM levels AS l WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, CASE WHEN pg_column_size(payload) < 2048 AND pg_column_compression(payload) IS NULL THEN pg_column_size(payload) ELSE octet_length(payload::text) END AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND run_at <= now() AND kind = k.kind
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM (
    SELECT id, sum(size) OVER (ORDER BY priority DESC, run_at, id) - size AS before
      FROM picked) AS sized
 WHERE before < %(claim_bytes)s
 LIMIT 20 - (SELECT count(*) FROM limited)))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       (SELECT count(pg_notify('pgqueue_jobs:results', job_id::text))
          FROM (SELECT job_id FROM failed_rows_results
                UNION ALL SELECT job_id FROM cancelled_results) AS k)
       + (SELECT count(pg_notify('pgqueue_jobs', ''))
            FROM (SELECT FROM (SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                        UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f HAVING count(*) > 0) AS w),
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       (SELECT min((1 - tokens) / per_second) FROM spent WHERE tokens < 1),
       (SELECT count(*) FROM (SELECT slot FROM failed_rows_freed WHERE job_id IS NULL
                UNION ALL SELECT slot FROM cancelled_freed WHERE job_id IS NULL) AS f),
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=False kinds=False plain=True heads=True)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
heads(queue, priority, run_at, id) AS (
    SELECT * FROM jsonb_to_recordset(%(heads)s::jsonb)
        AS h(queue text, priority smallint, run_at timestamptz, id bigint)),
found(queue) AS (
    SELECT CASE WHEN z.queue IS NULL THEN
           (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL)
         ELSE coalesce(
           (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND (queue, priority) < (z.queue, z.priority)),
           z.queue) END
      FROM (SELECT (SELECT h.queue FROM heads AS h
                     ORDER BY h.queue, h.priority LIMIT 1) AS queue,
                   (SELECT h.priority FROM heads AS h
                     ORDER BY h.queue, h.priority LIMIT 1) AS priority) AS z
  UNION ALL
    SELECT CASE WHEN z.queue IS NULL THEN
           (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue > f.queue)
         ELSE coalesce(
           (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue > f.queue
               AND (queue, priority) < (z.queue, z.priority)),
           z.queue) END
      FROM found AS f
      LEFT JOIN LATERAL (SELECT h.queue, h.priority FROM heads AS h WHERE h.queue > f.queue
                          ORDER BY h.queue, h.priority LIMIT 1) AS z ON true
     WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT l.queue, coalesce(
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority
               AND (priority, run_at, id) > (coalesce(z.priority, (-32768)::smallint),
                                             coalesce(z.run_at, '-infinity'::timestamptz),
                                             coalesce(z.id, 0::bigint))),
           z.priority)
      FROM (SELECT queue, 32767::smallint AS priority FROM served) AS l
      LEFT JOIN LATERAL (SELECT h.priority, h.run_at, h.id FROM heads AS h
                          WHERE h.queue = l.queue AND h.priority < l.priority
                          ORDER BY h.priority DESC LIMIT 1) AS z ON true
  UNION ALL
    SELECT l.queue, coalesce(
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority
               AND (priority, run_at, id) > (coalesce(z.priority, (-32768)::smallint),
                                             coalesce(z.run_at, '-infinity'::timestamptz),
                                             coalesce(z.id, 0::bigint))),
           z.priority)
      FROM levels AS l
      LEFT JOIN LATERAL (SELECT h.priority, h.run_at, h.id FROM heads AS h
                          WHERE h.queue = l.queue AND h.priority < l.priority
                          ORDER BY h.priority DESC LIMIT 1) AS z ON true
     WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
             LEFT JOIN heads AS h ON h.queue = l.queue AND h.priority = l.priority
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND (run_at, id) > (coalesce(h.run_at, '-infinity'::timestamptz),
                                         coalesce(h.id, 0::bigint))
                     AND run_at <= now()
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       0,
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       0,
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=False kinds=True plain=True heads=True)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
heads(queue, priority, run_at, id) AS (
    SELECT * FROM jsonb_to_recordset(%(heads)s::jsonb)
        AS h(queue text, priority smallint, run_at timestamptz, id bigint)),
found(queue) AS (
    SELECT CASE WHEN z.queue IS NULL THEN
           (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL)
         ELSE coalesce(
           (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND (queue, priority) < (z.queue, z.priority)),
           z.queue) END
      FROM (SELECT (SELECT h.queue FROM heads AS h
                     ORDER BY h.queue, h.priority LIMIT 1) AS queue,
                   (SELECT h.priority FROM heads AS h
                     ORDER BY h.queue, h.priority LIMIT 1) AS priority) AS z
  UNION ALL
    SELECT CASE WHEN z.queue IS NULL THEN
           (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue > f.queue)
         ELSE coalesce(
           (SELECT min(queue) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue > f.queue
               AND (queue, priority) < (z.queue, z.priority)),
           z.queue) END
      FROM found AS f
      LEFT JOIN LATERAL (SELECT h.queue, h.priority FROM heads AS h WHERE h.queue > f.queue
                          ORDER BY h.queue, h.priority LIMIT 1) AS z ON true
     WHERE f.queue IS NOT NULL),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT l.queue, coalesce(
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority
               AND (priority, run_at, id) > (coalesce(z.priority, (-32768)::smallint),
                                             coalesce(z.run_at, '-infinity'::timestamptz),
                                             coalesce(z.id, 0::bigint))),
           z.priority)
      FROM (SELECT queue, 32767::smallint AS priority FROM served) AS l
      LEFT JOIN LATERAL (SELECT h.priority, h.run_at, h.id FROM heads AS h
                          WHERE h.queue = l.queue AND h.priority < l.priority
                          ORDER BY h.priority DESC LIMIT 1) AS z ON true
  UNION ALL
    SELECT l.queue, coalesce(
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority
               AND (priority, run_at, id) > (coalesce(z.priority, (-32768)::smallint),
                                             coalesce(z.run_at, '-infinity'::timestamptz),
                                             coalesce(z.id, 0::bigint))),
           z.priority)
      FROM levels AS l
      LEFT JOIN LATERAL (SELECT h.priority, h.run_at, h.id FROM heads AS h
                          WHERE h.queue = l.queue AND h.priority < l.priority
                          ORDER BY h.priority DESC LIMIT 1) AS z ON true
     WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
             LEFT JOIN heads AS h ON h.queue = l.queue AND h.priority = l.priority CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND (run_at, id) > (coalesce(h.run_at, '-infinity'::timestamptz),
                                         coalesce(h.id, 0::bigint))
                     AND run_at <= now() AND kind = k.kind
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       0,
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       0,
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=True kinds=False plain=True heads=True)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
heads(queue, priority, run_at, id) AS (
    SELECT * FROM jsonb_to_recordset(%(heads)s::jsonb)
        AS h(queue text, priority smallint, run_at timestamptz, id bigint)),
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT l.queue, coalesce(
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority
               AND (priority, run_at, id) > (coalesce(z.priority, (-32768)::smallint),
                                             coalesce(z.run_at, '-infinity'::timestamptz),
                                             coalesce(z.id, 0::bigint))),
           z.priority)
      FROM (SELECT queue, 32767::smallint AS priority FROM served) AS l
      LEFT JOIN LATERAL (SELECT h.priority, h.run_at, h.id FROM heads AS h
                          WHERE h.queue = l.queue AND h.priority < l.priority
                          ORDER BY h.priority DESC LIMIT 1) AS z ON true
  UNION ALL
    SELECT l.queue, coalesce(
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority
               AND (priority, run_at, id) > (coalesce(z.priority, (-32768)::smallint),
                                             coalesce(z.run_at, '-infinity'::timestamptz),
                                             coalesce(z.id, 0::bigint))),
           z.priority)
      FROM levels AS l
      LEFT JOIN LATERAL (SELECT h.priority, h.run_at, h.id FROM heads AS h
                          WHERE h.queue = l.queue AND h.priority < l.priority
                          ORDER BY h.priority DESC LIMIT 1) AS z ON true
     WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
             LEFT JOIN heads AS h ON h.queue = l.queue AND h.priority = l.priority
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND (run_at, id) > (coalesce(h.run_at, '-infinity'::timestamptz),
                                         coalesce(h.id, 0::bigint))
                     AND run_at <= now()
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       0,
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       0,
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== turn(queues=True kinds=True plain=True heads=True)
WITH relax AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),
read AS MATERIALIZED (SELECT pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) AS before),
failed AS (SELECT NULL::bigint AS id, NULL::text AS status WHERE false),
done AS (
    DELETE FROM "pgqueue_jobs"
     WHERE id = ANY(%(done)s::bigint[]) AND status = 'running' AND locked_by = %(worker)s AND limit_key IS NULL AND result_ttl IS NULL AND dependents IS NULL
    RETURNING "id", "attempts", "kind", "queue", "limit_key", "result_ttl", "last_error", "dependents"),
claimed AS (
UPDATE "pgqueue_jobs" AS j
   SET status = 'running', locked_at = now(), locked_by = %(worker)s, attempts = j.attempts + 1
 WHERE j.id = ANY(ARRAY(
WITH RECURSIVE
heads(queue, priority, run_at, id) AS (
    SELECT * FROM jsonb_to_recordset(%(heads)s::jsonb)
        AS h(queue text, priority smallint, run_at timestamptz, id bigint)),
found(queue) AS (SELECT unnest(%(queues)s::text[])),
served(queue) AS (
    SELECT queue FROM found
     WHERE queue IS NOT NULL
       AND NOT EXISTS (SELECT FROM "pgqueue_jobs_queues" AS q WHERE q.queue = found.queue AND q.paused)),
levels(queue, priority) AS (
    SELECT l.queue, coalesce(
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority
               AND (priority, run_at, id) > (coalesce(z.priority, (-32768)::smallint),
                                             coalesce(z.run_at, '-infinity'::timestamptz),
                                             coalesce(z.id, 0::bigint))),
           z.priority)
      FROM (SELECT queue, 32767::smallint AS priority FROM served) AS l
      LEFT JOIN LATERAL (SELECT h.priority, h.run_at, h.id FROM heads AS h
                          WHERE h.queue = l.queue AND h.priority < l.priority
                          ORDER BY h.priority DESC LIMIT 1) AS z ON true
  UNION ALL
    SELECT l.queue, coalesce(
           (SELECT max(priority) FROM "pgqueue_jobs"
             WHERE status = 'pending' AND limit_key IS NULL
               AND queue = l.queue AND priority < l.priority
               AND (priority, run_at, id) > (coalesce(z.priority, (-32768)::smallint),
                                             coalesce(z.run_at, '-infinity'::timestamptz),
                                             coalesce(z.id, 0::bigint))),
           z.priority)
      FROM levels AS l
      LEFT JOIN LATERAL (SELECT h.priority, h.run_at, h.id FROM heads AS h
                          WHERE h.queue = l.queue AND h.priority < l.priority
                          ORDER BY h.priority DESC LIMIT 1) AS z ON true
     WHERE l.priority IS NOT NULL),
picked AS (
    SELECT p.priority, x.run_at, x.id, x.size
      FROM (SELECT DISTINCT priority FROM levels
             WHERE priority IS NOT NULL ORDER BY priority DESC) AS p
     CROSS JOIN LATERAL (
           SELECT c.run_at, c.id, c.size
             FROM levels AS l
             LEFT JOIN heads AS h ON h.queue = l.queue AND h.priority = l.priority CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
            CROSS JOIN LATERAL (
                  SELECT run_at, id, 0 AS size FROM "pgqueue_jobs"
                   WHERE status = 'pending' AND limit_key IS NULL
                     AND queue = l.queue AND priority = l.priority
                     AND (run_at, id) > (coalesce(h.run_at, '-infinity'::timestamptz),
                                         coalesce(h.id, 0::bigint))
                     AND run_at <= now() AND kind = k.kind
                     AND NOT coalesce(starts_with(last_error, 'lease expired'), false)
                   ORDER BY run_at, id
                   LIMIT 20
                   FOR UPDATE SKIP LOCKED) AS c
            WHERE l.priority = p.priority
            ORDER BY c.run_at, c.id
            LIMIT 20) AS x
     LIMIT 20)
SELECT id FROM picked))
RETURNING "j"."id", "j"."kind", "j"."payload", "j"."attempts", "j"."max_attempts", "j"."status", "j"."run_at", "j"."last_error", "j"."locked_by", "j"."locked_at", "j"."created_at", "j"."queue", "j"."priority", "j"."unique_key", extract(epoch FROM j.result_ttl)::float8 AS "result_ttl", "j"."limit_key", j.cancel_requested_at IS NOT NULL AS "cancel_requested", "j"."trace_context", "j"."parents")
SELECT (SELECT coalesce(array_agg(id), '{}') FROM done),
       (SELECT coalesce(array_agg(id), '{}') FROM failed),
       (SELECT coalesce(array_agg(status), '{}') FROM failed),
       (SELECT coalesce(json_agg(json_build_array("claimed"."id", "claimed"."kind", "claimed"."payload", "claimed"."attempts", "claimed"."max_attempts", "claimed"."status", "claimed"."run_at", "claimed"."last_error", "claimed"."locked_by", "claimed"."locked_at", "claimed"."created_at", "claimed"."queue", "claimed"."priority", "claimed"."unique_key", "claimed"."result_ttl", "claimed"."limit_key", "claimed"."cancel_requested", "claimed"."trace_context", "claimed"."parents")), '[]') FROM claimed),
       0,
       EXISTS (SELECT FROM "pgqueue_jobs_limit_slots"),
       NULL::double precision,
       0,
       pg_stat_get_xact_tuples_returned('"pgqueue_jobs_unlimited"'::regclass) - read.before
  FROM relax, read

-- ==== migration 1, step 1
CREATE TABLE IF NOT EXISTS "pgqueue_jobs" (
    id           bigserial PRIMARY KEY,
    kind         text NOT NULL,
    payload      jsonb NOT NULL DEFAULT 'null',
    run_at       timestamptz NOT NULL DEFAULT now(),
    attempts     integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts integer NOT NULL DEFAULT 3 CHECK (max_attempts >= 1),
    status       text NOT NULL DEFAULT 'pending'
                 CHECK (status IN ('pending', 'running', 'dead')),
    locked_at    timestamptz,
    locked_by    text,
    last_error   text,
    created_at   timestamptz NOT NULL DEFAULT now()
)

-- ==== migration 1, step 2
SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute
 WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped

-- ==== migration 1, step 3
CREATE INDEX IF NOT EXISTS "pgqueue_jobs_ready" ON "pgqueue_jobs" (run_at, id) WHERE status = 'pending'

-- ==== migration 2, step 1
ALTER TABLE "pgqueue_jobs" ALTER COLUMN payload SET DEFAULT 'null'

-- ==== migration 2, step 2
SELECT a.attname FROM pg_constraint c
  JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY(c.conkey)
 WHERE c.conrelid = %s::regclass AND c.contype = 'c' AND cardinality(c.conkey) = 1

-- ==== migration 3, step 1
ALTER TABLE "pgqueue_jobs" SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000, autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 5000)

-- ==== migration 4, step 1
CREATE TABLE IF NOT EXISTS "pgqueue_jobs_history" (
    id           bigint NOT NULL,
    kind         text NOT NULL,
    payload      jsonb NOT NULL,
    attempts     integer NOT NULL,
    max_attempts integer NOT NULL,
    outcome      text NOT NULL CHECK (outcome IN ('succeeded', 'dead')),
    last_error   text,
    locked_by    text,
    created_at   timestamptz NOT NULL,
    finished_at  timestamptz NOT NULL DEFAULT now()
)

-- ==== migration 4, step 2
CREATE INDEX IF NOT EXISTS "pgqueue_jobs_history_finished" ON "pgqueue_jobs_history" (finished_at)

-- ==== migration 5, step 1
CREATE INDEX IF NOT EXISTS "pgqueue_jobs_orphans" ON "pgqueue_jobs" (run_at, id) WHERE status = 'pending' AND starts_with(last_error, 'lease expired')

-- ==== migration 6, step 1
SELECT i.indrelid IS NOT DISTINCT FROM %s::regclass, i.indisvalid,
       CASE WHEN i.indisunique = %s THEN split_part(pg_get_indexdef(c.oid), ' USING ', 2) END
  FROM pg_class c LEFT JOIN pg_index i ON i.indexrelid = c.oid
 WHERE c.oid = to_regclass(%s)

-- ==== migration 6, step 2
CREATE INDEX IF NOT EXISTS "pgqueue_jobs_running" ON "pgqueue_jobs" (locked_at) WHERE status = 'running' AND locked_at IS NOT NULL

-- ==== migration 7, step 1
ALTER TABLE "pgqueue_jobs"
    ADD COLUMN IF NOT EXISTS queue text NOT NULL DEFAULT 'default',
    ADD COLUMN IF NOT EXISTS priority smallint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS unique_key text,
    ADD COLUMN IF NOT EXISTS unique_scope text

-- ==== migration 7, step 2
ALTER TABLE "pgqueue_jobs" ADD CHECK (priority BETWEEN -100 AND 100) NOT VALID

-- ==== migration 7, step 3
ALTER TABLE "pgqueue_jobs" ADD CHECK (unique_scope IN ('queued', 'active', 'window')) NOT VALID

-- ==== migration 7, step 4
ALTER TABLE "pgqueue_jobs" ADD CHECK ((unique_key IS NULL) = (unique_scope IS NULL)) NOT VALID

-- ==== migration 7, step 5
ALTER TABLE "pgqueue_jobs_history" ADD COLUMN IF NOT EXISTS queue text NOT NULL DEFAULT 'default', ADD COLUMN IF NOT EXISTS priority smallint NOT NULL DEFAULT 0

-- ==== migration 7, step 6
SELECT i.indrelid IS NOT DISTINCT FROM %s::regclass, i.indisvalid,
       CASE WHEN i.indisunique = %s THEN split_part(pg_get_indexdef(c.oid), ' USING ', 2) END
  FROM pg_class c LEFT JOIN pg_index i ON i.indexrelid = c.oid
 WHERE c.oid = to_regclass(%s)

-- ==== migration 7, step 7
CREATE INDEX IF NOT EXISTS "pgqueue_jobs_claim" ON "pgqueue_jobs" (queue, priority, run_at, id) WHERE status = 'pending'

-- ==== migration 7, step 8
SELECT i.indrelid IS NOT DISTINCT FROM %s::regclass, i.indisvalid,
       CASE WHEN i.indisunique = %s THEN split_part(pg_get_indexdef(c.oid), ' USING ', 2) END
  FROM pg_class c LEFT JOIN pg_index i ON i.indexrelid = c.oid
 WHERE c.oid = to_regclass(%s)

-- ==== migration 7, step 9
CREATE UNIQUE INDEX IF NOT EXISTS "pgqueue_jobs_unique_queued" ON "pgqueue_jobs" (unique_key) WHERE unique_scope = 'queued' AND status = 'pending' AND attempts = 0

-- ==== migration 7, step 10
SELECT i.indrelid IS NOT DISTINCT FROM %s::regclass, i.indisvalid,
       CASE WHEN i.indisunique = %s THEN split_part(pg_get_indexdef(c.oid), ' USING ', 2) END
  FROM pg_class c LEFT JOIN pg_index i ON i.indexrelid = c.oid
 WHERE c.oid = to_regclass(%s)

-- ==== migration 7, step 11
CREATE UNIQUE INDEX IF NOT EXISTS "pgqueue_jobs_unique_active" ON "pgqueue_jobs" (unique_key) WHERE unique_scope = 'active' AND status IN ('pending', 'running')

-- ==== migration 7, step 12
CREATE TABLE IF NOT EXISTS "pgqueue_jobs_unique_leases" (
    unique_key text PRIMARY KEY,
    job_id     bigint NOT NULL,
    expires_at timestamptz NOT NULL
)

-- ==== migration 7, step 13
CREATE TABLE IF NOT EXISTS "pgqueue_jobs_queues" (
    queue      text PRIMARY KEY,
    paused     boolean NOT NULL DEFAULT false,
    changed_at timestamptz NOT NULL DEFAULT now()
)

-- ==== migration 7, step 14
CREATE TABLE IF NOT EXISTS "pgqueue_jobs_schedules" (
    name        text PRIMARY KEY,
    kind        text NOT NULL,
    cron        text,
    every       interval,
    tz          text NOT NULL DEFAULT 'UTC',
    payload     jsonb NOT NULL DEFAULT 'null',
    queue       text NOT NULL DEFAULT 'default',
    priority    smallint NOT NULL DEFAULT 0,
    overlap     boolean NOT NULL DEFAULT true,
    paused      boolean NOT NULL DEFAULT false,
    last_tick   timestamptz,
    last_job_id bigint,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CHECK ((cron IS NULL) <> (every IS NULL))
)

-- ==== migration 7, step 15
SELECT pg_get_userbyid(a.grantee), a.privilege_type
  FROM pg_class AS c, aclexplode(c.relacl) AS a
 WHERE c.oid = %s::regclass AND a.grantee <> 0 AND a.grantee <> c.relowner
   AND a.privilege_type IN ('SELECT', 'INSERT', 'UPDATE', 'DELETE')
 ORDER BY 1, 2

-- ==== migration 7 contract, step 1
DROP INDEX IF EXISTS "pgqueue_jobs_ready"

-- ==== migration 8, step 1
ALTER TABLE "pgqueue_jobs"
    ADD COLUMN IF NOT EXISTS cancel_requested_at timestamptz,
    ADD COLUMN IF NOT EXISTS result_ttl interval,
    ADD COLUMN IF NOT EXISTS limit_key text

-- ==== migration 8, step 2
ALTER TABLE "pgqueue_jobs" ADD CHECK (result_ttl > interval '0') NOT VALID

-- ==== migration 8, step 3
SELECT conname FROM pg_constraint
 WHERE conrelid = %s::regclass AND contype = 'c' AND pg_get_constraintdef(oid) LIKE %s

-- ==== migration 8, step 4
ALTER TABLE "pgqueue_jobs_history" ADD CHECK (outcome IN ('succeeded', 'dead', 'cancelled')) NOT VALID

-- ==== migration 8, step 5
SELECT i.indrelid IS NOT DISTINCT FROM %s::regclass, i.indisvalid,
       CASE WHEN i.indisunique = %s THEN split_part(pg_get_indexdef(c.oid), ' USING ', 2) END
  FROM pg_class c LEFT JOIN pg_index i ON i.indexrelid = c.oid
 WHERE c.oid = to_regclass(%s)

-- ==== migration 8, step 6
CREATE INDEX IF NOT EXISTS "pgqueue_jobs_unlimited" ON "pgqueue_jobs" (queue, priority, run_at, id) WHERE status = 'pending' AND limit_key IS NULL

-- ==== migration 8, step 7
SELECT i.indrelid IS NOT DISTINCT FROM %s::regclass, i.indisvalid,
       CASE WHEN i.indisunique = %s THEN split_part(pg_get_indexdef(c.oid), ' USING ', 2) END
  FROM pg_class c LEFT JOIN pg_index i ON i.indexrelid = c.oid
 WHERE c.oid = to_regclass(%s)

-- ==== migration 8, step 8
CREATE INDEX IF NOT EXISTS "pgqueue_jobs_limited" ON "pgqueue_jobs" (limit_key, priority DESC, run_at, id) WHERE status = 'pending' AND limit_key IS NOT NULL

-- ==== migration 8, step 9
CREATE TABLE IF NOT EXISTS "pgqueue_jobs_results" (
    job_id      bigint PRIMARY KEY,
    kind        text NOT NULL,
    queue       text NOT NULL,
    outcome     text NOT NULL CHECK (outcome IN ('succeeded', 'dead', 'cancelled')),
    value       jsonb,
    error       text,
    attempts    integer NOT NULL,
    finished_at timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
)

-- ==== migration 8, step 10
CREATE INDEX IF NOT EXISTS "pgqueue_jobs_results_expiry" ON "pgqueue_jobs_results" (expires_at)

-- ==== migration 8, step 11
CREATE TABLE IF NOT EXISTS "pgqueue_jobs_limits" (
    limit_key  text PRIMARY KEY,
    max_running integer NOT NULL CHECK (max_running >= 0),
    changed_at timestamptz NOT NULL DEFAULT now()
)

-- ==== migration 8, step 12
CREATE TABLE IF NOT EXISTS "pgqueue_jobs_limit_slots" (
    limit_key text NOT NULL,
    slot      integer NOT NULL,
    job_id    bigint,
    attempt   integer,
    taken_at  timestamptz,
    PRIMARY KEY (limit_key, slot),
    CHECK ((job_id IS NULL) = (attempt IS NULL))
)

-- ==== migration 8, step 13
SELECT pg_get_userbyid(a.grantee), a.privilege_type
  FROM pg_class AS c, aclexplode(c.relacl) AS a
 WHERE c.oid = %s::regclass AND a.grantee <> 0 AND a.grantee <> c.relowner
   AND a.privilege_type IN ('SELECT', 'INSERT', 'UPDATE', 'DELETE')
 ORDER BY 1, 2

-- ==== migration 8 contract, step 1
DROP INDEX IF EXISTS "pgqueue_jobs_claim"

-- ==== migration 9, step 1
ALTER TABLE "pgqueue_jobs" ADD COLUMN IF NOT EXISTS trace_context text

-- ==== migration 10, step 1
ALTER TABLE "pgqueue_jobs_limits"
    ALTER COLUMN max_running DROP NOT NULL,
    ADD COLUMN IF NOT EXISTS per_second  double precision CHECK (per_second > 0),
    ADD COLUMN IF NOT EXISTS burst       integer CHECK (burst >= 1),
    ADD COLUMN IF NOT EXISTS tokens      double precision,
    ADD COLUMN IF NOT EXISTS refilled_at timestamptz,
    ADD CHECK ((per_second IS NULL) = (burst IS NULL))

-- ==== migration 11, step 1
SELECT i.indrelid IS NOT DISTINCT FROM %s::regclass, i.indisvalid,
       CASE WHEN i.indisunique = %s THEN split_part(pg_get_indexdef(c.oid), ' USING ', 2) END
  FROM pg_class c LEFT JOIN pg_index i ON i.indexrelid = c.oid
 WHERE c.oid = to_regclass(%s)

-- ==== migration 11, step 2
CREATE INDEX IF NOT EXISTS "pgqueue_jobs_dead" ON "pgqueue_jobs" (id) WHERE status = 'dead'

-- ==== migration 12, step 1
ALTER TABLE "pgqueue_jobs" SET (fillfactor = 40)

-- ==== migration 13, step 1
ALTER TABLE "pgqueue_jobs"
    ADD COLUMN IF NOT EXISTS waiting_on integer,
    ADD COLUMN IF NOT EXISTS dependents integer,
    ADD COLUMN IF NOT EXISTS parents jsonb

-- ==== migration 13, step 2
SELECT conname FROM pg_constraint
 WHERE conrelid = %s::regclass AND contype = 'c'
   AND pg_get_constraintdef(oid) LIKE '%%status%%' AND pg_get_constraintdef(oid) LIKE '%%dead%%'

-- ==== migration 13, step 3
ALTER TABLE "pgqueue_jobs" ADD CHECK (status IN ('pending', 'running', 'dead', 'waiting')) NOT VALID

-- ==== migration 13, step 4
CREATE TABLE IF NOT EXISTS "pgqueue_jobs_dependencies" (
    parent_id bigint NOT NULL,
    job_id    bigint NOT NULL,
    PRIMARY KEY (parent_id, job_id)
)

-- ==== migration 13, step 5
SELECT i.indrelid IS NOT DISTINCT FROM %s::regclass, i.indisvalid,
       CASE WHEN i.indisunique = %s THEN split_part(pg_get_indexdef(c.oid), ' USING ', 2) END
  FROM pg_class c LEFT JOIN pg_index i ON i.indexrelid = c.oid
 WHERE c.oid = to_regclass(%s)

-- ==== migration 13, step 6
CREATE INDEX IF NOT EXISTS "pgqueue_jobs_waiting" ON "pgqueue_jobs" (id) WHERE status = 'waiting'

-- ==== migration 13, step 7
SELECT pg_get_userbyid(a.grantee), a.privilege_type
  FROM pg_class AS c, aclexplode(c.relacl) AS a
 WHERE c.oid = %s::regclass AND a.grantee <> 0 AND a.grantee <> c.relowner
   AND a.privilege_type IN ('SELECT', 'INSERT', 'UPDATE', 'DELETE')
 ORDER BY 1, 2

-- ==== seed.claim
UPDATE "pgqueue_jobs" SET status='running', locked_at=now(), locked_by=%s, attempts=attempts+1
 WHERE id IN (
   SELECT id FROM "pgqueue_jobs"
    WHERE status='pending' AND run_at <= now()
    ORDER BY run_at, id
    LIMIT %s
    FOR UPDATE SKIP LOCKED)
 RETURNING id, kind, payload, attempts, max_attempts

-- ==== seed.count
SELECT count(*) FROM "pgqueue_jobs"

-- ==== seed.create[0]
CREATE TABLE "pgqueue_jobs" (
  id           bigserial PRIMARY KEY,
  kind         text NOT NULL,
  payload      jsonb NOT NULL,
  run_at       timestamptz NOT NULL DEFAULT now(),
  attempts     int NOT NULL DEFAULT 0,
  max_attempts int NOT NULL DEFAULT 3,
  locked_at    timestamptz,
  locked_by    text,
  status       text NOT NULL DEFAULT 'pending',
  last_error   text,
  created_at   timestamptz NOT NULL DEFAULT now()
)

-- ==== seed.create[1]
CREATE INDEX "pgqueue_jobs_ready" ON "pgqueue_jobs" (run_at, id) WHERE status = 'pending'

-- ==== seed.delete
DELETE FROM "pgqueue_jobs" WHERE id = %s

-- ==== seed.delete_batch
DELETE FROM "pgqueue_jobs" WHERE id = ANY(%s)

-- ==== seed.insert
INSERT INTO "pgqueue_jobs" (kind, payload) VALUES (%s, %s)
