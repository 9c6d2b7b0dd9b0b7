"""A Django project for tests/test_django.py: a shop whose orders send receipts."""
