package catalog

// StageUnchanged ends a rollout whose retrain produced the very model
// already served (the same digest): there is nothing to roll out.
const StageUnchanged = "unchanged"
