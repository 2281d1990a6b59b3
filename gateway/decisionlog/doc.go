// Package decisionlog is sbx's decision log as a versioned stream
// (docs/decision-log.md): the Record type and its field names, the encoder
// (Record.AppendJSON), the writer (Log, which numbers records and writes
// them to its sinks: a FileSink, the Ring the gateway's API serves) and
// the one decoder (Decoder, Reader), so that no package reads or writes
// the log by hand.
//
// A log is JSON Lines: one record per line, UTF-8, each with "v" set to
// SchemaVersion. Readers stream it: a Reader holds one line at a time and
// a Decoder interns the few strings that repeat, so a log of any length
// is read in constant memory.
//
// A log file may sit in a directory a sandbox can write, so OpenFileSink
// appends only to a regular file of its own uid with one link, never
// following a symbolic link or blocking on a pipe there; and a FileSink
// keeps to a budget (records a second, bytes in all; budget.go) so that
// a flooding sandbox cannot fill the disk, without hiding a request that
// goes upstream. A FileSink is its budget, its fault watcher (watch.go)
// and its batch writer (batch.go), each a type of its own. Log.Commit
// writes a record that lets a request go on:
// it returns an error, a *LogFileError or a *LogFullError, when the file
// cannot hold it (an I/O error, the size limit reached, or the file
// removed or replaced, which the sink's watch notices: watch.go), and
// the gateway then blocks the request. Over the rate, the sink may leave
// out a repeat of a target it wrote in full, counted on that target in a
// dropped record; a new target is always written. It never leaves out a
// policy record.
//
// The package imports no other sbx package: every reader and writer of a
// log can use it.
package decisionlog
