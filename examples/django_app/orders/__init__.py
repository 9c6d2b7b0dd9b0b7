"""Orders, and the receipt each one sends."""
