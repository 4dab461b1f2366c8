import os
import sys

from hypothesis import HealthCheck, settings

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support")
)  # helpers: oracles, layouts, models

settings.register_profile(
    "default", deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large], print_blob=True
)
settings.load_profile("default")
