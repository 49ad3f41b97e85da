// Command hooksoracle reads hooks.d files as containers/common's pkg/hooks 1.0.0 reader
// does, with Go's own encoding/json and regexp: the reference that tests/test_check.py
// compares ocihook/check/hooksd.py with. The structs below have the field names, types and JSON
// tags of containers/common's hook.Hook and hook.When and the runtime-spec's Hook; the
// checks follow hook.Hook.Validate, with CRI-O's stages (no extension stages).
//
// Input: one hooks.d document per line, hex-encoded. Output: one JSON object per line,
// {"verdict": "ok"|"error"|"skip"|"unchecked", "decoded": <the decoded Hook or null>}.
package main

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
)

type execHook struct {
	Path    string   `json:"path"`
	Args    []string `json:"args,omitempty"`
	Env     []string `json:"env,omitempty"`
	Timeout *int     `json:"timeout,omitempty"`
}

type when struct {
	Always        *bool             `json:"always,omitempty"`
	Annotations   map[string]string `json:"annotations,omitempty"`
	Commands      []string          `json:"commands,omitempty"`
	HasBindMounts *bool             `json:"hasBindMounts,omitempty"`
	Or            bool              `json:"-"`
}

type hook struct {
	Version string   `json:"version"`
	Hook    execHook `json:"hook"`
	When    when     `json:"when"`
	Stages  []string `json:"stages"`
}

var stages = map[string]bool{
	"createContainer": true, "createRuntime": true, "prestart": true,
	"poststart": true, "poststop": true, "startContainer": true,
}

func validate(h *hook) error {
	if h.Hook.Path == "" {
		return errors.New("missing required property: hook.path")
	}
	if _, err := os.Stat(h.Hook.Path); err != nil {
		return err
	}
	for key, value := range h.When.Annotations {
		if _, err := regexp.Compile(key); err != nil {
			return err
		}
		if _, err := regexp.Compile(value); err != nil {
			return err
		}
	}
	for _, command := range h.When.Commands {
		if _, err := regexp.Compile(command); err != nil {
			return err
		}
	}
	if h.Stages == nil {
		return errors.New("missing required property: stages")
	}
	for _, stage := range h.Stages {
		if !stages[stage] {
			return fmt.Errorf("unknown stage %q", stage)
		}
	}
	return nil
}

func verdict(doc []byte) (string, *hook) {
	var ver struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(doc, &ver); err != nil {
		return "error", nil
	}
	if ver.Version == "" || ver.Version == "0.1.0" {
		return "unchecked", nil
	}
	if ver.Version != "1.0.0" {
		return "error", nil
	}
	var h hook
	if err := json.Unmarshal(doc, &h); err != nil {
		return "error", nil
	}
	if err := validate(&h); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "skip", &h
		}
		return "error", &h
	}
	return "ok", &h
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<26)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for in.Scan() {
		doc, err := hex.DecodeString(in.Text())
		if err != nil {
			fmt.Fprintln(os.Stderr, "hooksoracle: bad hex:", err)
			os.Exit(2)
		}
		v, h := verdict(doc)
		line, err := json.Marshal(map[string]any{"verdict": v, "decoded": h})
		if err != nil {
			fmt.Fprintln(os.Stderr, "hooksoracle:", err)
			os.Exit(2)
		}
		out.Write(append(line, '\n'))
	}
}
