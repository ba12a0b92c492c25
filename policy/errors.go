package policy

import (
	"fmt"
	"sort"
	"strings"
)

// Position is a place in a policy file: 1-based line and column.
type Position struct {
	Line   int `json:"line"`
	Column int `json:"column"`
}

// Error is one problem in a policy file, with where it is and which field.
type Error struct {
	File   string `json:"file"`
	Line   int    `json:"line"`
	Column int    `json:"column"`
	// Field is the path of the field in the document ("spec.resources.memory").
	Field string `json:"field"`
	Msg   string `json:"message"`
}

// Error renders "file:line:col: field: message".
func (e *Error) Error() string {
	field := e.Field
	if field == "" {
		field = "(document)"
	}
	return fmt.Sprintf("%s:%d:%d: %s: %s", e.File, e.Line, e.Column, field, e.Msg)
}

// ErrorList is every problem found in a file, in file order. Parse returns
// all of them at once.
type ErrorList []*Error

// Error joins the errors one per line.
func (l ErrorList) Error() string {
	var b strings.Builder
	for i, e := range l {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

func (l ErrorList) sorted() ErrorList {
	sort.SliceStable(l, func(i, j int) bool {
		if l[i].Line != l[j].Line {
			return l[i].Line < l[j].Line
		}
		return l[i].Column < l[j].Column
	})
	return l
}
