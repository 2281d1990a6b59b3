// Package selftest tries every way out of a sandbox that sbx knows of,
// from inside sandboxes made as sbx run makes them, and says which were
// stopped: sbx selftest.
//
// Run makes an "outside" (a network namespace of its own, reached from
// the host through a veth pair, with servers that answer with a secret
// and count what reaches them), a second sandbox, and, in two rounds, a
// probed sandbox, through the run library (run.Start): the first as sbx
// run makes it, the second with its namespace's rules flushed so that the
// host's rules must hold alone. In each it runs the probe (Options.ProbeExe,
// which calls RunProbe) with a plan of attempts on its standard input;
// the probe makes them and writes what each saw, judging nothing. Run
// makes each attempt's control from where its target may be reached,
// judges every case of the escape catalogue from the controls, the
// probe's report and what the targets' servers saw, and writes a line per
// case and a summary. A case passes only when the probe did not reach
// its target and the control did.
//
// The package words nothing for a command line: what a caller may want
// to tell its user besides the report comes as a Note. It needs Linux and
// root; elsewhere Run returns an error wrapping errors.ErrUnsupported.
package selftest
