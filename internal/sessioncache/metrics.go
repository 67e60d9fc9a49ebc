package sessioncache

// CountByGroup returns the number of live sessions per group (groups
// without sessions are absent), for metrics read at scrape time.
func (c *Cache[T]) CountByGroup() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int)
	for k := range c.m {
		out[k.Group]++
	}
	return out
}
