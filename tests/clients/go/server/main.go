// A Go SDK server whose tool ignores its caller's cancel, as the Go SDK lets it: the SDK then writes the tool's
// answer though the call was cancelled (go-sdk issue #1259). Over stdio.
// Usage: go_server VAULT. The tool `blocking_insert` writes VAULT/blocking, waits until the test opens the FIFO
// VAULT/gate, appends its row to VAULT/rows and answers.
package main

import (
	"context"
	"log"
	"os"
	"path/filepath"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type insertArgs struct {
	Row string `json:"row"`
}

func main() {
	vault := os.Args[1]
	server := mcp.NewServer(&mcp.Implementation{Name: "go-gated", Version: "0"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "blocking_insert"},
		func(ctx context.Context, _ *mcp.CallToolRequest, args insertArgs) (*mcp.CallToolResult, any, error) {
			if err := os.WriteFile(filepath.Join(vault, "blocking"), []byte("started"), 0o644); err != nil {
				return nil, nil, err
			}
			// Not ctx: the work goes on whatever the caller does.
			if _, err := os.ReadFile(filepath.Join(vault, "gate")); err != nil {
				return nil, nil, err
			}
			rows, err := os.OpenFile(filepath.Join(vault, "rows"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return nil, nil, err
			}
			defer rows.Close()
			if _, err := rows.WriteString(args.Row + "\n"); err != nil {
				return nil, nil, err
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "inserted " + args.Row}}}, nil, nil
		})
	if err := server.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		log.Fatal(err)
	}
}
