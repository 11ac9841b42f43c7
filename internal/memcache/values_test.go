package memcache

import "testing"

// TestValueClasses guards valuePools' geometry: a value of largeValue bytes takes the first pool, one of
// maxPooledValue the last, and each pool's arrays hold every size it is asked for.
func TestValueClasses(t *testing.T) {
	if valueClass(largeValue) != 0 || valueClass(maxPooledValue) != valueClasses-1 {
		t.Fatalf("classes: %d for largeValue, %d for maxPooledValue, want 0 and %d", valueClass(largeValue), valueClass(maxPooledValue), valueClasses-1)
	}
	for n := largeValue; n <= maxPooledValue; n += 997 {
		if c := valueClass(n); largeValue<<c < n || c > 0 && largeValue<<(c-1) >= n {
			t.Fatalf("%d bytes in class %d (%d-byte arrays)", n, c, largeValue<<c)
		}
	}
}
