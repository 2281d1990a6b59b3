// Command httpsget fetches a URL with Go's net/http and prints the status
// and body: the Go client of cmd/sbx's TLS inspection tests, which trusts
// the sandbox's CA through SSL_CERT_FILE like any Go binary.
//
//	httpsget [-d BODY] URL [NAME:VALUE ...]
//
// sends each NAME:VALUE as a request header; with -d it POSTs BODY
// (Content-Type: application/json unless a header says otherwise). It
// exits 1 when the request fails; any status is printed.
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
)

func main() {
	args := os.Args[1:]
	method, body := http.MethodGet, ""
	if len(args) > 1 && args[0] == "-d" {
		method, body, args = http.MethodPost, args[1], args[2:]
	}
	req, err := http.NewRequest(method, args[0], strings.NewReader(body))
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	} else {
		req.Body, req.ContentLength = nil, 0
	}
	for _, h := range args[1:] {
		name, value, _ := strings.Cut(h, ":")
		req.Header.Set(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	fmt.Printf("%d %s", resp.StatusCode, out)
}
