package storage

// PathsToSync is what an upload into a directory syncs.
var PathsToSync = pathsToSync
