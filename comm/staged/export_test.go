package staged

// CachedBuffers is the number of host buffers c keeps between calls.
func CachedBuffers(c *Comm) int { return c.cache.size() }
