"""The shop: orders, the tasks and handlers they cause, and a log of what ran."""
