package sharestate_test

import (
	"errors"
	"testing"

	"github.com/sharelog/sharelog/internal/storage/sharestate"
	"github.com/sharelog/sharelog/internal/storage/sharestate/sharestatetest"
)

type memMedium struct{ med *sharestate.MemMedium }

func (m memMedium) Open(*testing.T) sharestate.Store { return sharestate.OpenMem(m.med) }

func (m memMedium) Crash(*testing.T) sharestatetest.Medium { return memMedium{m.med.Crash()} }

func (m memMedium) SetFailing(on bool) bool {
	var err error
	if on {
		err = errors.New("injected write failure")
	}
	m.med.SetFailing(err)
	return true
}

func TestMemConformance(t *testing.T) {
	sharestatetest.Run(t, func(*testing.T) sharestatetest.Medium { return memMedium{sharestate.NewMemMedium()} })
}
