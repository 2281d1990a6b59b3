// Command httpsget fetches a URL with Go's net/http and prints the status
// and body: the Go client of cmd/sbx's TLS inspection tests, which trusts
// the sandbox's CA through SSL_CERT_FILE like any Go binary.
//
//	httpsget [-X METHOD] [-d BODY] [-ca FILE] [-chain] URL [NAME:VALUE ...]
//
// sends each NAME:VALUE as a request header, and BODY (-d) with METHOD
// (-X; default POST with a body, else GET), as application/json unless a
// header names another Content-Type. -ca trusts the certificates in FILE
// alone instead of the system's roots. -chain prints, before the status,
// a line for each certificate the server showed: "cert N serial=HEX
// not-after=RFC3339 subject=NAME issuer=NAME". It exits 1 when the
// request fails; any status is printed.
package main

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	method := flag.String("X", "", "the request's `METHOD` (default POST with -d, else GET)")
	body := flag.String("d", "", "the request's `BODY`")
	caFile := flag.String("ca", "", "trust the certificates in `FILE` alone")
	chain := flag.Bool("chain", false, "print the certificates the server showed")
	flag.Parse()
	if flag.NArg() < 1 {
		fmt.Println("error: give a URL")
		os.Exit(2)
	}
	var rd io.Reader
	if *body != "" {
		rd = strings.NewReader(*body)
		if *method == "" {
			*method = http.MethodPost
		}
	}
	req, err := http.NewRequest(cmp.Or(*method, http.MethodGet), flag.Arg(0), rd)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	if *body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, h := range flag.Args()[1:] {
		name, value, _ := strings.Cut(h, ":")
		req.Header.Set(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if *caFile != "" {
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			fmt.Println("error: no certificate in", *caFile)
			os.Exit(1)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: roots}
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	if *chain && resp.TLS != nil {
		for i, c := range resp.TLS.PeerCertificates {
			fmt.Printf("cert %d serial=%x not-after=%s subject=%s issuer=%s\n", i, c.SerialNumber, c.NotAfter.UTC().Format(time.RFC3339), c.Subject, c.Issuer)
		}
	}
	b, _ := io.ReadAll(resp.Body)
	fmt.Printf("%d %s", resp.StatusCode, b)
}
