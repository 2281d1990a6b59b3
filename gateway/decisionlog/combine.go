package decisionlog

import (
	"strings"

	"github.com/hashicorp/go-multierror"
)

// Combine combines errs with multierror, the module's one way of
// combining errors, skipping nils: nil when there are none. Its message
// is one line per error, as errors.Join words them, so that a message
// that wraps it stays readable (multierror's own list would put "N errors
// occurred:" in the middle of it).
func Combine(errs ...error) error {
	me := multierror.Append(nil, errs...)
	me.ErrorFormat = lineFormat
	return me.ErrorOrNil()
}

// lineFormat is the multierror format of combine: one line per error.
func lineFormat(errs []error) string {
	lines := make([]string, len(errs))
	for i, e := range errs {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}
