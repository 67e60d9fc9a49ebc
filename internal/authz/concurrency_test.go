package authz

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
)

// Concurrent CreateAcls and DeleteAcls lose no update: every change is
// saved, and what a restart loads is what the last change left.
func TestConcurrentChangesLoseNothing(t *testing.T) {
	dir := t.TempDir()
	store, err := NewFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewACL(context.Background(), store, nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 16
	keep := func(i int) Binding {
		return Binding{Principal: "User:keep", ResourceType: Topic, PatternType: Literal, ResourceName: fmt.Sprintf("t%d", i), Operation: Read, Permission: Allow}
	}
	drop := func(i int) Binding {
		return Binding{Principal: "User:drop", ResourceType: Topic, PatternType: Literal, ResourceName: fmt.Sprintf("t%d", i), Operation: Read, Permission: Allow}
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := a.Create(context.Background(), []Binding{keep(i), drop(i)}); err != nil {
				t.Error(err)
			}
			if _, err := a.Delete(context.Background(), []Filter{{Principal: "User:drop", ResourceName: fmt.Sprintf("t%d", i)}}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	reloaded, err := NewACL(context.Background(), store, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := reloaded.Bindings()
	if len(got) != n {
		t.Fatalf("after restart: %d bindings, want the %d kept: %v", len(got), n, got)
	}
	for _, b := range got {
		if b.Principal != "User:keep" {
			t.Fatalf("a deleted binding came back: %v", b)
		}
	}
	if !reflect.DeepEqual(got, a.Bindings()) {
		t.Fatalf("memory and file disagree")
	}
}
