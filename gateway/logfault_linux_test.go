package gateway

import (
	"errors"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/decisionlog/decisionlogtest"
)

// TestPrivilegedFaultLogFull runs a gateway whose decision log is on a
// 64 KiB tmpfs, and sends it 2000 requests to an allowed upstream from 8
// clients until the filesystem is full: every request the upstream got
// has its allow record in the file, the requests after are refused with
// 403 naming ENOSPC, and the gateway's logger says so. Needs root to
// mount the tmpfs.
func TestPrivilegedFaultLogFull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	dir := t.TempDir()
	decisionlogtest.MountTinyTmpfs(t, dir)
	fg := startFaultGateway(t, dir) // closed before the unmount

	var (
		wg      sync.WaitGroup
		refused atomic.Int64
		named   atomic.Int64 // refusals whose body names ENOSPC
		mu      sync.Mutex
		reached = map[string]bool{}
	)
	const clients, each = 8, 250
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				p := "/" + strconv.Itoa(c) + "-" + strconv.Itoa(i)
				resp, err := fg.client.Get(fg.up.URL + p)
				if err != nil {
					t.Error(err)
					return
				}
				var body strings.Builder
				buf := make([]byte, 4096)
				for {
					n, err := resp.Body.Read(buf)
					body.Write(buf[:n])
					if err != nil {
						break
					}
				}
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					mu.Lock()
					reached[p] = true
					mu.Unlock()
				case http.StatusForbidden:
					refused.Add(1)
					if strings.Contains(body.String(), "no space left on device") {
						named.Add(1)
					}
				default:
					t.Errorf("GET %s: got %d", p, resp.StatusCode)
				}
			}
		}()
	}
	wg.Wait()
	fg.logs.waitFor(t, "cannot be written (write: no space left on device)", 1)
	// Close writes what it still holds (the refusals' count) if it fits:
	// the tmpfs has no free page, but the log's last page may have room
	// for a short record, which a cut-back write left. Either Close says
	// how many records the file lacks, or the file ends with the dropped
	// record that counts them.
	var le *decisionlog.LogFileError
	switch err := fg.g.Close(); {
	case err == nil:
		recs := decisionlogtest.ReadLines(t, fg.path)
		if last := recs[len(recs)-1]; last.Event != decisionlog.EventDropped || last.Count == 0 || !strings.Contains(last.Reason, "no space left on device") {
			t.Errorf("Close with the log's filesystem full wrote its last records, but the last is %+v, want a dropped record counting the refused ones and naming ENOSPC", last)
		}
	case !errors.As(err, &le) || !le.Closing || le.Lost == 0 || !errors.Is(err, unix.ENOSPC) || !strings.Contains(err.Error(), "lacks its last"):
		t.Errorf("Close with the log's filesystem full: got %v, want a *LogFileError saying how many records the file lacks, and ENOSPC", err)
	}

	logged := map[string]bool{}
	for _, r := range decisionlogtest.ReadLines(t, fg.path) {
		if r.Event == decisionlog.EventDecision && r.Action == "allow" {
			logged[r.Path] = true
		}
	}
	unrecorded := 0
	for p := range reached {
		if !logged[p] {
			unrecorded++
		}
	}
	t.Logf("%d requests reached the upstream, %d allow records in the file, %d refused (%d naming ENOSPC)",
		fg.hits.Load(), len(logged), refused.Load(), named.Load())
	if unrecorded > 0 {
		t.Errorf("%d of %d requests that reached the upstream have no record in the file", unrecorded, len(reached))
	}
	if int(fg.hits.Load()) != len(reached) {
		t.Errorf("the upstream got %d requests, and %d were answered 200", fg.hits.Load(), len(reached))
	}
	if refused.Load() == 0 || named.Load() != refused.Load() {
		t.Errorf("%d requests refused, %d naming ENOSPC: want some refused once the file is full, each naming ENOSPC", refused.Load(), named.Load())
	}
}
