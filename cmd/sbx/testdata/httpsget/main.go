// Command httpsget fetches a URL with Go's net/http and prints the status
// and body: the Go client of cmd/sbx's TLS inspection tests, which trusts
// the sandbox's CA through SSL_CERT_FILE like any Go binary.
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
)

func main() {
	resp, err := http.Get(os.Args[1])
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Printf("%d %s", resp.StatusCode, body)
}
