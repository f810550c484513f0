"""Pop consumption's rules, pure."""
