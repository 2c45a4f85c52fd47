"""The page at `/`: HTML, script and style, served as package data."""
