// The Go SDK's client against the gated server (tests/gated_server.py), driven through every way a call ends,
// printing what it saw as one JSON object.
// Usage: go_client stdio VAULT COMMAND ARG... | go_client http VAULT URL
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	transportName, vault, target := os.Args[1], os.Args[2], os.Args[3:]
	var transport mcp.Transport
	if transportName == "stdio" {
		transport = &mcp.CommandTransport{Command: exec.Command(target[0], target[1:]...)}
	} else {
		transport = &mcp.StreamableClientTransport{Endpoint: target[0]}
	}
	ctx := context.Background()
	client := mcp.NewClient(&mcp.Implementation{Name: "go-client", Version: "0"}, nil)
	session, err := client.Connect(ctx, transport, nil)
	if err != nil {
		fail(err)
	}
	seen := map[string]string{}
	call := func(ctx context.Context, name string, arguments map[string]any) string {
		result, err := session.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: arguments})
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			return "timeout"
		case errors.Is(err, context.Canceled):
			return "aborted"
		case err != nil:
			return "error " + err.Error()
		case result.IsError:
			return "isError"
		}
		return "result"
	}
	text := func(name string, arguments map[string]any) string {
		result, err := session.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: arguments})
		if err != nil {
			fail(err)
		}
		return result.Content[0].(*mcp.TextContent).Text
	}

	seen["echo"] = call(ctx, "echo", map[string]any{"text": "hi"})
	seen["broken"] = call(ctx, "broken", map[string]any{"text": "hi"})

	// The caller's context, cancelled mid-call.
	stop, abort := context.WithCancel(ctx)
	aborted := make(chan string)
	go func() { aborted <- call(stop, "hang", nil) }()
	for text("in_flight", map[string]any{"tool": "hang"}) != "yes" {
	}
	abort()
	seen["abort"] = <-aborted

	// Its deadline.
	deadline, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	seen["timeout"] = call(deadline, "hang", nil)
	cancel()

	// The 2026-07-28 single-exchange HTTP entry (mcp 2.x) drops a posted `notifications/cancelled`: a call is
	// cancelled by closing its request, which the server notices at a time no probe can tell. No ghost there.
	// The same client still serves the calls after its cancels.
	if session.InitializeResult().ProtocolVersion == "2026-07-28" && transportName == "http" {
		seen["after_cancels"] = call(ctx, "echo", map[string]any{"text": "again"})
		finish(session, seen)
		return
	}

	// A ghost: a write that cannot be interrupted has started, its caller gives up, then the write is let finish.
	giveUp, abandon := context.WithCancel(ctx)
	write := make(chan string)
	go func() { write <- call(giveUp, "shielded_write", map[string]any{"name": "g.md"}) }()
	call(ctx, "wait_started", nil)
	abandon()
	seen["ghost"] = <-write
	for text("cancel_read", map[string]any{"tool": "shielded_write"}) != "read" {
	}
	call(ctx, "release", nil)
	for {
		if _, err := os.Stat(filepath.Join(vault, "g.md")); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The caller saw a cancel, and retries the write that already happened.
	seen["retry"] = call(ctx, "shielded_write", map[string]any{"name": "g.md"})
	finish(session, seen)
}

func finish(session *mcp.ClientSession, seen map[string]string) {
	session.Close()
	out, _ := json.Marshal(seen)
	fmt.Println(string(out))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
