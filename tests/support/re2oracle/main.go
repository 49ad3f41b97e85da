// Command re2oracle answers, for each pattern, what Go's regexp.Compile says: the reference
// that tests/test_goregexp_syntax.py compares ocihook/check/goregexp/syntax.py with.
//
// Input: one pattern per line, hex-encoded (patterns may hold newlines and invalid UTF-8).
// Output: one line per pattern, "ok", or "error <hex code> <hex expr>" (regexp/syntax.Error).
package main

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"regexp/syntax"
	"runtime"
)

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<30)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	if len(os.Args) > 1 && os.Args[1] == "-version" {
		fmt.Fprintln(out, runtime.Version())
		return
	}
	for in.Scan() {
		pattern, err := hex.DecodeString(in.Text())
		if err != nil {
			fmt.Fprintln(os.Stderr, "re2oracle: bad hex:", err)
			os.Exit(2)
		}
		_, err = regexp.Compile(string(pattern))
		var syntaxError *syntax.Error
		switch {
		case err == nil:
			fmt.Fprintln(out, "ok")
		case errors.As(err, &syntaxError):
			fmt.Fprintf(out, "error %x %x\n", string(syntaxError.Code), syntaxError.Expr)
		default:
			fmt.Fprintf(out, "other %x\n", err.Error())
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "re2oracle:", err)
		os.Exit(2)
	}
}
