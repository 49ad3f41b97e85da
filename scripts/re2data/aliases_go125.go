//go:build go1.25

package main

import "unicode"

func init() { categoryAliases = unicode.CategoryAliases }
