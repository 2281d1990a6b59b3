package api

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/mockllm"
)

// TestJournaledWire: a mock's journal entry encodes as api.MockRequest
// as it does as mockllm.Journaled, every field set, so that a field the
// journal gains and the API does not carry is noticed.
func TestJournaledWire(t *testing.T) {
	j := mockllm.Journaled{
		Seq: 3, Time: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), Method: "POST", Path: "/v1/messages",
		Dialect: mockllm.Anthropic, Model: "m", Stream: true, Body: json.RawMessage(`{"a":1}`), BodyTruncated: true,
		Turn: 2, Unmatched: true, Status: 429, Outcome: "turn 2: fault 429",
	}
	// Every field must be set, or a new one would pass unnoticed.
	rv := reflect.ValueOf(j)
	for i := range rv.NumField() {
		if rv.Field(i).IsZero() {
			t.Fatalf("mockllm.Journaled.%s is not set in this test; set it, and carry it in api.MockRequest", rv.Type().Field(i).Name)
		}
	}
	want, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(journaled(j))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("api.MockRequest encodes as\n%s\nwant, as mockllm.Journaled,\n%s", got, want)
	}
}
