//go:build !race

package main_test

// raceBuild says the test binary has the race detector (go test -race).
const raceBuild = false
