package logstore_test

import (
	"testing"

	"github.com/sharelog/sharelog/internal/storage/logstore"
	"github.com/sharelog/sharelog/internal/storage/logstore/logstoretest"
)

func TestMemStoreConformance(t *testing.T) {
	logstoretest.Run(t, func(t *testing.T) logstore.Store {
		s := logstore.NewMem()
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

func TestMemStoreKeyIndexConformance(t *testing.T) {
	logstoretest.RunKeyIndex(t, func(t *testing.T) (logstore.Store, logstore.KeyIndexer) {
		s := logstore.NewMem()
		t.Cleanup(func() { _ = s.Close() })
		return s, s
	})
}
