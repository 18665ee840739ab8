"""Changes to a serving node: what is deployed, what was last known good, and the attempts between."""
