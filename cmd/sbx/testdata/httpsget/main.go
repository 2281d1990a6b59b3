// Command httpsget fetches a URL with Go's net/http and prints the status
// and body: the Go client of cmd/sbx's TLS inspection tests, which trusts
// the sandbox's CA through SSL_CERT_FILE like any Go binary.
//
//	httpsget URL [NAME:VALUE ...]
//
// sends each NAME:VALUE as a request header. It exits 1 when the request
// fails; any status is printed.
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
)

func main() {
	req, err := http.NewRequest(http.MethodGet, os.Args[1], nil)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	for _, h := range os.Args[2:] {
		name, value, _ := strings.Cut(h, ":")
		req.Header.Set(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Printf("%d %s", resp.StatusCode, body)
}
