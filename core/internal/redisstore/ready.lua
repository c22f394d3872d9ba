-- Touches no key: proves that the user may run scripts (Limiter.Ready).
return {1}
