package hybridlimit

import "strings"

// SlotCount is the number of Redis Cluster hash slots.
const SlotCount = 16384

// Slot returns the Redis Cluster hash slot of a key name, as CLUSTER KEYSLOT
// computes it: CRC16 (XMODEM) of the hash tag, the bytes between the first
// '{' and the first '}' after it, when there is at least one such byte, or
// of the whole key otherwise, modulo 16384.
func Slot(key string) int {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if n := strings.IndexByte(key[open+1:], '}'); n > 0 {
			key = key[open+1 : open+1+n]
		}
	}
	return int(crc16(key)) & (SlotCount - 1)
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the variant
// the Redis Cluster specification uses.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^s[i]]
	}
	return crc
}

var crc16Table = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()
