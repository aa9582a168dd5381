package agent

// IsPermanent tells the tests whether the agent would exit ExitPermanent on err.
var IsPermanent = isPermanent
