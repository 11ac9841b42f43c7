package container

import (
	"database/sql"
	"strings"
	"testing"

	"github.com/keywaydb/keyway/internal/testenv"
)

// TestOpenChecksPrivileges: an account without the privileges a container needs on its table fails Open with a
// message naming what is missing and the GRANT that fixes it, not "table does not exist" (no privileges) nor a
// 1142 at every later set (SELECT only). SELECT alone is enough for a read-only container.
func TestOpenChecksPrivileges(t *testing.T) {
	m := testenv.SharedMariaDB(t)
	root, err := sql.Open("mysql", m.RootDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	// Not in schema test: mariadb-install-db grants every account all privileges on test and test_%.
	exec(t, root, "CREATE DATABASE IF NOT EXISTS kw_privs")
	exec(t, root, "DROP TABLE IF EXISTS kw_privs.privs")
	exec(t, root, "CREATE TABLE kw_privs.privs (k VARCHAR(32) PRIMARY KEY, v TEXT, f INT, c BIGINT UNSIGNED, e INT)")
	for _, u := range []string{"kw_none", "kw_select", "kw_role"} {
		exec(t, root, "DROP USER IF EXISTS "+u+"@'%'")
		exec(t, root, "CREATE USER "+u+"@'%' IDENTIFIED BY 'pw'")
	}
	exec(t, root, "GRANT SELECT ON kw_privs.privs TO kw_select@'%'")
	t.Cleanup(func() {
		for _, u := range []string{"kw_none", "kw_select", "kw_role"} {
			_, _ = root.Exec("DROP USER IF EXISTS " + u + "@'%'")
		}
		_, _ = root.Exec("DROP ROLE IF EXISTS kw_writer")
	})
	def := Def{Name: "privs", Schema: "kw_privs", Table: "privs", KeyColumn: "k", ValueColumns: []string{"v"},
		FlagsColumn: "f", CASColumn: "c", ExpiryColumn: "e"}
	as := func(user string) *sql.DB {
		db, err := sql.Open("mysql", user+":pw@tcp("+m.Addr+")/")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	for _, tc := range []struct {
		user     string
		readOnly bool
		want     []string // in the error; nil: Open succeeds
	}{
		{"kw_none", false, []string{`container "privs"`, "'kw_none'@'%' lacks", "SELECT, INSERT, UPDATE, DELETE",
			"GRANT SELECT, INSERT, UPDATE, DELETE ON `kw_privs`.`privs` TO 'kw_none'@'%'"}},
		{"kw_none", true, []string{"'kw_none'@'%' lacks", "GRANT SELECT ON `kw_privs`.`privs` TO 'kw_none'@'%'"}},
		{"kw_select", false, []string{"'kw_select'@'%' lacks", ": INSERT, UPDATE, DELETE;",
			"GRANT INSERT, UPDATE, DELETE ON `kw_privs`.`privs` TO 'kw_select'@'%'"}},
		{"kw_select", true, nil},
	} {
		c, err := Open(ctx, as(tc.user), def, Options{ReadOnly: tc.readOnly})
		if tc.want == nil {
			if err != nil {
				t.Errorf("%s read-only: %v", tc.user, err)
			} else {
				c.Close()
			}
			continue
		}
		if err == nil {
			c.Close()
			t.Errorf("%s (read-only %v): Open succeeded (not checked: %v)", tc.user, tc.readOnly, c.NotChecked())
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s (read-only %v): %v\nwant it to contain %q", tc.user, tc.readOnly, err, w)
			}
		}
	}
	// Privileges held through a schema-wide grant count as well.
	exec(t, root, "GRANT INSERT, UPDATE, DELETE ON kw_privs.* TO kw_select@'%'")
	c, err := Open(ctx, as("kw_select"), def, Options{})
	if err != nil {
		t.Fatalf("with SELECT on the table and the rest on the schema: %v", err)
	}
	c.Close()

	// And privileges held through the account's default role.
	exec(t, root, "DROP ROLE IF EXISTS kw_writer")
	exec(t, root, "CREATE ROLE kw_writer")
	exec(t, root, "GRANT SELECT, INSERT, UPDATE, DELETE ON kw_privs.privs TO kw_writer")
	exec(t, root, "GRANT kw_writer TO kw_role@'%'")
	exec(t, root, "SET DEFAULT ROLE kw_writer FOR kw_role@'%'")
	c, err = Open(ctx, as("kw_role"), def, Options{})
	if err != nil {
		t.Fatalf("with the privileges through the default role: %v", err)
	}
	c.Close()
}
