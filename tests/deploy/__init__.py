"""Deployment checks: compose, images, collector configs with auth, Loki and the Grafana dashboard."""
