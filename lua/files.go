package lua

import "embed"

// Files holds the scripts' sources, the .lua files of this directory, as
// they are on disk: a script's body without the shared files put before it.
// The limiters build their scripts from it when the program starts, so
// changing it afterwards changes nothing they run.
//
//go:embed *.lua
var Files embed.FS

// File returns the text of the file name, such as "gcra.lua".
func File(name string) (string, error) {
	b, err := Files.ReadFile(name)
	return string(b), err
}
