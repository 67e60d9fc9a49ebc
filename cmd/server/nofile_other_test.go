//go:build !linux

package main

// applyChildNoFile: the descriptor-budget tests run on Linux only.
func applyChildNoFile() {}
