package run

import "github.com/sbx-dev/sbx/gateway/mockllm"

// Recorders are recordings for a gateway that runs without a sandbox (sbx
// gateway), written as Run.Close writes a sandbox's: give Gateway to
// gateway.Config.RecordLLM, and call Write once the gateway is closed,
// so that every exchange is in.
type Recorders struct{ rs []recording }

// NewRecorders makes a recorder for each of rs.
func NewRecorders(rs []Recording) *Recorders { return &Recorders{rs: newRecordings(rs)} }

// Gateway is the recorders by host, for gateway.Config.RecordLLM; nil
// when there are none.
func (r *Recorders) Gateway() map[string]*mockllm.Recorder { return recorders(r.rs) }

// Write writes each recording's script, whole or not at all, and notes
// each it wrote (a Recorded) with note. The errors are *RecordingError
// values.
func (r *Recorders) Write(note func(Note)) []error { return writeRecordings(r.rs, note) }
