// Package decisionlog is sbx's decision log as a versioned stream
// (docs/decision-log.md): the Record type and its field names, the encoder
// (Record.AppendJSON, which the gateway's Log writes through) and the one
// decoder (Decoder, Reader), so that no package reads or writes the log
// by hand.
//
// A log is JSON Lines: one record per line, UTF-8, each with "v" set to
// SchemaVersion. Readers stream it: a Reader holds one line at a time and
// a Decoder interns the few strings that repeat, so a log of any length
// is read in constant memory.
package decisionlog
