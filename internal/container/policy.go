package container

import "fmt"

// Policy says where one class of operations on a container (get, set, delete, flush) is served: the InnoDB
// memcached plugin's cache_policies, with keyway's names.
type Policy uint8

// The policies. The zero Policy is not one of them: every container states each of its four.
const (
	Caching   Policy = iota + 1 // the local store in front of the table, kept valid by the engine
	CacheOnly                   // the local store alone; the table is never touched
	DBOnly                      // the table every time
	Disabled                    // refused
)

var policyNames = [...]string{Caching: "caching", CacheOnly: "cache_only", DBOnly: "db_only", Disabled: "disabled"}

// String is the policy's name in keyway's config.
func (p Policy) String() string {
	if p >= Caching && int(p) < len(policyNames) {
		return policyNames[p]
	}
	return fmt.Sprintf("Policy(%d)", uint8(p))
}

// ParsePolicy reads a policy by its name in keyway's config ("caching", "cache_only", "db_only", "disabled").
func ParsePolicy(name string) (Policy, error) {
	for p, n := range policyNames {
		if n != "" && n == name {
			return Policy(p), nil
		}
	}
	return 0, fmt.Errorf("policy %q: want caching, cache_only, db_only or disabled", name)
}

// MarshalText makes a Policy show as its name in JSON status.
func (p Policy) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText reads a Policy back from its name (keyway stats decodes /status).
func (p *Policy) UnmarshalText(b []byte) (err error) {
	*p, err = ParsePolicy(string(b))
	return err
}

// Policies are a container's policy per operation class.
type Policies struct {
	Get, Set, Delete, Flush Policy
}

// WritesTable reports whether any write class reaches the table (caching or db_only): a container that never
// writes it opens with Options.ReadOnly and needs only SELECT.
func (p Policies) WritesTable() bool {
	reaches := func(q Policy) bool { return q == Caching || q == DBOnly }
	return reaches(p.Set) || reaches(p.Delete) || reaches(p.Flush)
}
