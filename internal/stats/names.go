package stats

// Names of the samples (see Sample) that the server reports and the admin dashboard reads back from the registry.
// They are part of /metrics' public surface: rename one only with its users and docs/operations.md.
const (
	// Backend groups, per member (labels group, address, role).
	BackendUp = "keyway_backend_up" // 1 while the member answers health checks
	// Per member of a group with replicas (label address): the replica's lag as the position watcher measures it,
	// and the reads routing sent to the member.
	BackendReplicaLag = "keyway_backend_replica_lag_seconds"
	BackendReads      = "keyway_backend_reads_total"
	// The shard map's version (only with sharding configured): the map statements and keys are routed by now.
	ShardMapVersion = "keyway_shard_map_version"
	// Per group: the most connections a pool of the group may open.
	BackendPoolMaxConnections = "keyway_backend_pool_max_connections"

	// Containers (label container). ContainerInfo is 1 and carries the container's table, group, policies and
	// write mode as labels.
	ContainerInfo           = "keyway_container_info"
	ContainerChecked        = "keyway_container_checked" // 1 once the table is checked and the container serves
	ContainerBatches        = "keyway_container_group_commit_batches_total"
	ContainerBatchedRows    = "keyway_container_group_commit_rows_total"
	ContainerWBPending      = "keyway_container_write_behind_pending_rows"
	ContainerWBPendingBytes = "keyway_container_write_behind_pending_bytes"
	ContainerWBWritten      = "keyway_container_write_behind_written_rows_total"
	ContainerWBDropped      = "keyway_container_write_behind_dropped_rows_total"
	ContainerWBFailedRounds = "keyway_container_write_behind_failed_rounds_total"

	// The local store. StoreInfo is 1 and carries persistence (on/off) and durability as labels.
	StoreInfo = "keyway_store_info"
)
