package agent

// IsPermanent tells the tests whether the agent would exit ExitPermanent on err.
var IsPermanent = isPermanent

// OpenStorage opens a storage location as a Job does.
var OpenStorage = openStorage
