//go:build !linux

package main

import "errors"

// openPromptTerminal: sbx run runs on Linux only.
func openPromptTerminal() (promptTerminal, error) { return nil, errors.ErrUnsupported }

// isTTY: no prompt, and so no terminal to tell, outside Linux.
func isTTY(any) bool { return false }
