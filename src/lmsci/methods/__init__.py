"""lmsci.methods"""
