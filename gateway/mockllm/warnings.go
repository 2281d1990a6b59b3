package mockllm

import (
	"fmt"
	"strings"
)

// Warning is something in a valid script that is likely a mistake, such
// as a turn that can never answer.
type Warning struct {
	// Turn is the 1-based position of the turn it concerns.
	Turn int
	// Origin is that turn's Origin, such as "script.yaml:12".
	Origin string
	// Msg says what is wrong and what to do.
	Msg string
}

// String returns "ORIGIN: turn N: message", or "turn N: message" when the
// turn has no Origin.
func (w Warning) String() string {
	s := fmt.Sprintf("turn %d: %s", w.Turn, w.Msg)
	if w.Origin != "" {
		s = w.Origin + ": " + s
	}
	return s
}

// Warnings returns the turns that can never answer: those after a turn of
// times: unlimited that fits every request they fit, which is never used
// up and so takes those requests first. A turn queued at runtime after
// such a turn is never reached either.
func Warnings(turns []Turn) []Warning {
	var ws []Warning
	for j := range turns {
		for i := range j {
			a := &turns[i]
			if a.Times != Unlimited || len(checkTurn(a)) > 0 || !covers(a.Match, turns[j].Match) {
				continue
			}
			what := "has no match"
			if a.Match != nil && *a.Match != (Match{}) {
				what = "matches every request this one matches"
			}
			ws = append(ws, Warning{Turn: j + 1, Origin: turns[j].Origin, Msg: fmt.Sprintf(
				"can never answer: %s answers every request it fits (times: unlimited) and %s; move this turn before it, or narrow its match",
				turnName(i, a), what)})
			break
		}
	}
	return ws
}

// covers reports whether every request that fits b fits a.
func covers(a, b *Match) bool {
	if a == nil {
		return true
	}
	if b == nil {
		b = &Match{}
	}
	return (a.Model == "" || a.Model == b.Model) &&
		(a.User == "" || b.User != "" && strings.Contains(b.User, a.User)) &&
		(a.UserRegexp == "" || a.UserRegexp == b.UserRegexp) &&
		(a.ToolResult == "" || a.ToolResult == b.ToolResult)
}

// turnName names the turn at index i: "turn 2 (script.yaml:7)".
func turnName(i int, t *Turn) string {
	if t.Origin != "" {
		return fmt.Sprintf("turn %d (%s)", i+1, t.Origin)
	}
	return fmt.Sprintf("turn %d", i+1)
}
