package main

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// fakeRuntime is a runtime's containers, by sandbox id.
type fakeRuntime struct {
	ids     []string
	removed []string
	fail    error
}

func (f *fakeRuntime) ContainerIDs(context.Context) ([]string, error) { return f.ids, nil }

func (f *fakeRuntime) RemoveContainer(_ context.Context, id string) error {
	f.removed = append(f.removed, id)
	return f.fail
}

// TestGCRuntimes: sbx gc sees the containers of every runtime, and asks
// each to remove a leftover's, even when another fails.
func TestGCRuntimes(t *testing.T) {
	ctx := context.Background()
	cd := &fakeRuntime{ids: []string{"1a2b3c4d"}, fail: errors.New("containerd is sad")}
	docker := &fakeRuntime{ids: []string{"5e6f7a8b"}}
	rts := gcRuntimes{cd, docker}
	ids, err := rts.ContainerIDs(ctx)
	if err != nil || !slices.Equal(ids, []string{"1a2b3c4d", "5e6f7a8b"}) {
		t.Errorf("ContainerIDs = %v, %v; want both runtimes' ids", ids, err)
	}
	err = rts.RemoveContainer(ctx, "5e6f7a8b")
	if !errors.Is(err, cd.fail) {
		t.Errorf("RemoveContainer: %v, want containerd's failure", err)
	}
	if !slices.Equal(cd.removed, []string{"5e6f7a8b"}) || !slices.Equal(docker.removed, []string{"5e6f7a8b"}) {
		t.Errorf("removed %v and %v, want the id from both", cd.removed, docker.removed)
	}
}
