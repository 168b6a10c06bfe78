// Command tiny is the smallest OpenAI-shaped engine the runner's tests
// patch and build: it answers /health and /v1/completions on its port,
// one request a connection, without net/http (a build in a fresh cache
// compiles little).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
)

func main() {
	port := flag.Int("port", 0, "port on 127.0.0.1")
	flag.Parse()
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", *port))
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
	fmt.Println("tiny engine serving on", ln.Addr())
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go handle(c)
	}
}

// handle answers one request on c and closes it.
func handle(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return
	}
	for {
		h, err := r.ReadString('\n')
		if err != nil || strings.TrimSpace(h) == "" {
			break
		}
	}
	fields := strings.Fields(line)
	if len(fields) < 2 {
		return
	}
	status, body := "404 Not Found", `{"error":"not found"}`
	switch fields[1] {
	case "/health":
		status, body = "200 OK", `{}`
	case "/v1/completions":
		status, body = "200 OK", answer()
	}
	fmt.Fprintf(c, "HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", status, len(body), body)
}

// answer is a completion's body.
func answer() string {
	return `{"choices":[{"text":"hello"}]}`
}
