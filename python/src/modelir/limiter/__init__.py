"""Client-side limits behind one interface (`BaseLimiter`), one backend per module.

`Limiter` (in `memory`) keeps one process's limits and is the default; `RedisLimiter` (in `redis_limiter`, the
`redis` extra) shares them between replicas. `settings` builds either from the configuration file.
"""

from modelir.limiter.base import BaseLimiter, feedback_pause, parse_reset
from modelir.limiter.memory import Limiter
from modelir.limiter.settings import LimiterBackend, limiter_backend

__all__ = ["BaseLimiter", "Limiter", "LimiterBackend", "feedback_pause", "limiter_backend", "parse_reset"]
