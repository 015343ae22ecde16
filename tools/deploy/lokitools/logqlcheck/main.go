// Command logqlcheck parses LogQL queries with Loki's own parser (pkg/logql/syntax) and
// reports each one's syntax error, so that the dashboard's queries are checked without a
// running Loki.
//
// Input on stdin: a JSON array of query strings. Output on stdout: a JSON array of
// {"query": ..., "error": ...} objects, in the same order, with "error" empty when the query
// parses. The exit code is 0 unless the input cannot be read.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/grafana/loki/v3/pkg/logql/syntax"
)

type result struct {
	Query string `json:"query"`
	Error string `json:"error"`
}

func main() {
	input, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "logqlcheck: reading stdin:", err)
		os.Exit(2)
	}
	var queries []string
	if err := json.Unmarshal(input, &queries); err != nil {
		fmt.Fprintln(os.Stderr, "logqlcheck: stdin must be a JSON array of strings:", err)
		os.Exit(2)
	}
	results := make([]result, 0, len(queries))
	for _, query := range queries {
		r := result{Query: query}
		if _, err := syntax.ParseExpr(query); err != nil {
			r.Error = err.Error()
		}
		results = append(results, r)
	}
	if err := json.NewEncoder(os.Stdout).Encode(results); err != nil {
		fmt.Fprintln(os.Stderr, "logqlcheck: writing stdout:", err)
		os.Exit(2)
	}
}
