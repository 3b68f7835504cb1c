"""lmsci.worlds"""
