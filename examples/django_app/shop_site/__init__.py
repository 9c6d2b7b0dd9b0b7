"""The example shop's Django project."""
