package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/go-multierror"

	"github.com/sbx-dev/sbx/gateway"
	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/rootfs"
	"github.com/sbx-dev/sbx/sandbox"
	"github.com/sbx-dev/sbx/sandbox/run"
)

// The libraries' typed errors say what is wrong in their own terms (a
// path for the decision log, a static answer, garbage collection); the
// command line says it with the flags that set it and the sbx commands
// that fix it. Each wording finds one typed error in err's chain and
// returns the library's message for it and sbx's.
// secretFilePlace is where a secret's value file goes: where the sandbox
// sees nothing (rootfs.Layout.Visible).
const secretFilePlace = "where the sandbox sees nothing: out of the working directory, of -v volumes (read-only ones too), of the --rootfs directory and, with --rootfs host, of the system directories it shows (/usr, /etc, /opt and the like) and of the home --home or --agent shows, e.g. in your home directory outside the working directory with the default --home empty"

var cliWordings = []func(err error) (lib, cli string, ok bool){
	secretWording,
	loginWording,
	func(err error) (string, string, bool) {
		var e *run.StillRecordedError
		if !errors.As(err, &e) {
			return "", "", false
		}
		return e.Error(), fmt.Sprintf("sandbox %s is running (or a crashed run left it: sbx gc removes that); stop it first: sbx stop %s", e.ID, e.ID), true
	},
	func(err error) (string, string, bool) {
		var e *run.SecretEnvError
		if !errors.As(err, &e) {
			return "", "", false
		}
		return e.Error(), fmt.Sprintf("-e %s=... and --secret %s (or a policy secret) both set %s: the secret's placeholder goes there; drop -e %s", e.Name, e.Name, e.Name, e.Name), true
	},
	func(err error) (string, string, bool) {
		var e *run.SecretFileError
		if !errors.As(err, &e) {
			return "", "", false
		}
		var re *run.ReadableError
		if errors.As(e.Reason, &re) {
			return e.Error(), e.Error() + ": keep the file " + secretFilePlace, true
		}
		return e.Error(), e.Error() + ": give a file sbx can look at, " + secretFilePlace, true
	},
	func(err error) (string, string, bool) {
		var e *gateway.StaticError
		if !errors.As(err, &e) {
			return "", "", false
		}
		if errors.Is(e.Err, gateway.ErrNotHostIP) {
			return e.Error(), fmt.Sprintf("--resolve %q: %v, e.g. --resolve api.test=203.0.113.7", e.Value, e.Err), true
		}
		return e.Error(), fmt.Sprintf("--resolve %q: %v", e.Value, e.Err), true
	},
	func(err error) (string, string, bool) {
		var e *decisionlog.UnsafeLogFileError
		if !errors.As(err, &e) {
			return "", "", false
		}
		if e.File == gateway.MockJournalName {
			return e.Error(), e.Say("another --mock-journal path"), true
		}
		return e.Error(), e.Say("another --log path"), true
	},
	func(err error) (string, string, bool) {
		var e *decisionlog.NonEmptyLogFileError
		if !errors.As(err, &e) {
			return "", "", false
		}
		if e.File == gateway.MockJournalName {
			return e.Error(), e.Say("another --mock-journal path (or --log path, beside which it is kept)", "give --log-append to add this run's journal to it"), true
		}
		return e.Error(), e.Say("another --log path", "give --log-append to add this run's records to it"), true
	},
	func(err error) (string, string, bool) {
		var e *sandbox.PoolExhaustedError
		if !errors.As(err, &e) {
			return "", "", false
		}
		return e.Error(), e.Say("run sbx gc to free leftovers of crashed runs", "give --subnet-pool a larger network"), true
	},
	func(err error) (string, string, bool) {
		var e *sandbox.NotFoundError
		if !errors.As(err, &e) {
			return "", "", false
		}
		return e.Error(), e.Say("sbx ps"), true
	},
	func(err error) (string, string, bool) {
		var e *sandbox.RecordKeptError
		if !errors.As(err, &e) {
			return "", "", false
		}
		return e.Error(), e.Say("sbx gc"), true
	},
	func(err error) (string, string, bool) {
		var e *rootfs.NotDirError
		if !errors.As(err, &e) {
			return "", "", false
		}
		return e.Error(), "--rootfs " + e.Dir + " is not a directory", true
	},
	func(err error) (string, string, bool) {
		var e *rootfs.SystemWorkDirError
		if !errors.As(err, &e) {
			return "", "", false
		}
		return e.Error(), "the working directory " + e.Dir + " would be shared read-write with the sandbox; run sbx from a project directory, or give -w", true
	},
}

// cliMessage is err's message as sbx says it: each typed error of the
// libraries in its chain worded with sbx's flags and commands, where the
// message holds it.
func cliMessage(err error) string {
	msg := err.Error()
	for _, word := range cliWordings {
		if lib, cli, ok := word(err); ok {
			msg = strings.Replace(msg, lib, cli, 1)
		}
	}
	return msg
}

// cliWorded is an error whose message is worded for the command line
// (cliMessage); it wraps the library's error.
type cliWorded struct {
	msg string
	err error
}

func (e *cliWorded) Error() string { return e.msg }
func (e *cliWorded) Unwrap() error { return e.err }

// cliError returns err worded for the command line (cliMessage), or err
// itself when there is nothing to word; nil for nil.
func cliError(err error) error {
	if err == nil {
		return nil
	}
	if msg := cliMessage(err); msg != err.Error() {
		return &cliWorded{msg: msg, err: err}
	}
	return err
}

// combine combines errs with multierror, the module's one way of
// combining errors, skipping nils: nil when there are none. Its message
// is one line per error, as errors.Join words them, so that a message
// that wraps it stays readable; reportError says each on its line.
func combine(errs ...error) error {
	me := multierror.Append(nil, errs...)
	me.ErrorFormat = func(errs []error) string {
		lines := make([]string, len(errs))
		for i, e := range errs {
			lines[i] = e.Error()
		}
		return strings.Join(lines, "\n")
	}
	return me.ErrorOrNil()
}
