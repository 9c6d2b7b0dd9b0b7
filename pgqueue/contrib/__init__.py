"""Integrations with web frameworks and ORMs.

Each module imports its framework and is importable only when that
framework is installed (``pip install 'pgqueue-jobs[fastapi]'`` and the like);
``import pgqueue`` never imports any of them.
"""
