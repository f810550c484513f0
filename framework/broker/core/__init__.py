"""The broker's shared rules (sans-I/O): response codes, request headers, its identity
and role, its properties and the escape bridge.

Every ``core`` package of the broker is pure: no trio, clock, socket, file or thread
(the import-linter contract ``triomq.broker.**.core`` checks it); its drivers sit one
level up, in the concern's package."""
