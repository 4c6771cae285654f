"""prism.loop"""
