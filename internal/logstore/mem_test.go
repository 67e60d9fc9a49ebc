package logstore_test

import (
	"testing"

	"github.com/sharelog/sharelog/internal/logstore"
	"github.com/sharelog/sharelog/internal/logstore/logstoretest"
)

func TestMemStoreConformance(t *testing.T) {
	logstoretest.Run(t, func(t *testing.T) logstore.Store {
		s := logstore.NewMem()
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}
