// SPDX-License-Identifier: Apache-2.0

package remedy

import (
	"strings"
	"testing"
)

// TestPostgresFixes: PostgreSQL at max_connections 20 (17 for ordinary
// clients): a pooler's pool never above those 17 slots; no pooler advised
// where a pooler holds the connections; pg_ctlcluster only for a cluster
// pg_createcluster made (its configuration under /etc/postgresql).
func TestPostgresFixes(t *testing.T) {
	fs := PostgresMaxConnections(64, "/var/lib/postgresql/data/postgresql.conf", 60, 17, "")
	if !strings.Contains(fs[0].Command, "default_pool_size = 16") || strings.Contains(fs[0].Command, "default_pool_size = 20") {
		t.Errorf("pooler fix above the 17 slots: %q", fs[0].Command)
	}
	if !strings.Contains(fs[1].Command, "pg_ctl -D /var/lib/postgresql/data restart") || strings.Contains(fs[1].Command, "pg_ctlcluster") {
		t.Errorf("initdb cluster restarted with %q", fs[1].Command)
	}
	fs = PostgresMaxConnections(64, "/etc/postgresql/15/main/postgresql.conf", 60, 17, "pgbouncer")
	for _, f := range fs {
		if strings.Contains(f.Text, "put a connection pooler") {
			t.Errorf("pooler advised in front of pgbouncer: %q", f.Text)
		}
	}
	if fs[0].Target != "pgbouncer" || !strings.Contains(fs[0].Command, "max_db_connections = 16") {
		t.Errorf("pgbouncer's pool not kept within the slots: %+v", fs[0])
	}
	if !strings.Contains(fs[1].Command, "pg_ctlcluster 15 main restart") {
		t.Errorf("Debian cluster restarted with %q", fs[1].Command)
	}
	if fs := PostgresMaxConnections(8, "/x/postgresql.conf", 3, 1, ""); !strings.Contains(fs[0].Command, "default_pool_size = 1,") {
		t.Errorf("one slot: %q", fs[0].Command)
	}
}
