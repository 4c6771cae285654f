"""prism.agents"""
