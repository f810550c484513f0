"""Settings for the whole suite.

Hypothesis, by default, fails an example that takes over 200 ms and a test
whose inputs are slow to generate: on a busy machine (CI's may be) both are
the scheduler's doing, not the code's. The fuzz tests keep their example
counts; only those two timing checks are off.
"""

from hypothesis import HealthCheck, settings

settings.register_profile("triomq", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("triomq")
